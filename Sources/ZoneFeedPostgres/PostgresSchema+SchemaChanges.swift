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
                    settings.recordTypes.append(PostgresRecordTypeMapping(recordType: change.recordType, table: change.table))
                }
            case .columnAdded:
                guard let field = change.field, let column = change.column, let type = change.columnType,
                    let i = settings.recordTypes.firstIndex(where: { $0.recordType == change.recordType && $0.table == change.table })
                else { continue }
                let mapping = settings.recordTypes[i]
                guard !mapping.omittedFields.contains(field), !mapping.fields.contains(where: { $0.field == field || $0.column == column })
                else { continue }
                var mapped = PostgresFieldMapping(field: field, column: column, type: type)
                mapped.cloudKitType = change.cloudKitType
                settings.recordTypes[i].fields.append(mapped)
            }
        }
        var evolved = PostgresSchema(pipelineName: pipelineName, settings: settings)
        evolved.version = max(version, changes.map(\.id).max() ?? 0)
        return evolved
    }
}
