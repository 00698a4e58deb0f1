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
    /// The CloudKit type of the field's first value: the only type the column takes.
    public var cloudKitType: String?
    /// What brought it, and why a name is not the plain snake_case one.
    public var why: String

    public init(
        kind: Kind, recordType: String, table: String, field: String? = nil, column: String? = nil, columnType: ColumnType? = nil,
        cloudKitType: String? = nil, why: String
    ) {
        self.kind = kind
        self.recordType = recordType
        self.table = table
        self.field = field
        self.column = column
        self.columnType = columnType
        self.cloudKitType = cloudKitType
        self.why = why
    }
}
