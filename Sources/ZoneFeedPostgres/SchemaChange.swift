/// A change of shape made to a pipeline's tables when records brought a record type or a field
/// its mapping lacked (`schemaEvolution: evolve`), as kept in `zonefeed_schema_changes`. The
/// pipeline's mapping with its changes replayed in order is the shape of its tables; a name once
/// given is read back from here, never derived again.
public struct SchemaChange: Sendable, Hashable {
    public enum Kind: String, Sendable, CaseIterable {
        case tableCreated = "table_created"
        case columnAdded = "column_added"
    }

    /// Its row's id; 0 until it is recorded.
    public var id: Int64 = 0
    public var kind: Kind
    public var recordType: String
    public var table: String
    public var field: String?
    public var column: String?
    public var columnType: ColumnType?
    /// What brought it, and why a name is not the plain snake_case one.
    public var why: String

    public init(
        kind: Kind, recordType: String, table: String, field: String? = nil, column: String? = nil, columnType: ColumnType? = nil,
        why: String
    ) {
        self.kind = kind
        self.recordType = recordType
        self.table = table
        self.field = field
        self.column = column
        self.columnType = columnType
        self.why = why
    }
}

extension PostgresSchema {
    /// This schema with `changes` replayed, in order: a table for a record type that has none,
    /// a column for a field its record type's table lacks. What the pipeline file maps itself
    /// wins over a change (a mapping edited after the change was made).
    public func applying(_ changes: [SchemaChange]) -> PostgresSchema {
        guard !changes.isEmpty else { return self }
        var settings = self.settings
        for change in changes {
            switch change.kind {
            case .tableCreated:
                if settings.mapping(forRecordType: change.recordType) == nil {
                    settings.recordTypes.append(RecordTypeMapping(recordType: change.recordType, table: change.table))
                }
            case .columnAdded:
                guard let field = change.field, let column = change.column, let type = change.columnType,
                    let i = settings.recordTypes.firstIndex(where: { $0.recordType == change.recordType && $0.table == change.table })
                else { continue }
                let mapping = settings.recordTypes[i]
                guard !mapping.omittedFields.contains(field), !mapping.fields.contains(where: { $0.field == field || $0.column == column })
                else { continue }
                settings.recordTypes[i].fields.append(FieldMapping(field: field, column: column, type: type))
            }
        }
        var evolved = PostgresSchema(pipelineName: pipelineName, settings: settings)
        evolved.version = max(version, changes.map(\.id).max() ?? 0)
        return evolved
    }
}
