extension PostgresSchema {
    /// This schema with `changes` replayed, in order: a table for a record type that has none,
    /// a column for a field its record type's table lacks. What the pipeline file maps itself
    /// wins over a change (a mapping edited after the change was made): a table made for a
    /// record type that the file now gives to another (a type renamed, its new name mapped to
    /// the old table) stays that other type's alone. Given to both, each type's batches took
    /// the other's rows for names re-used by another type, and tombstoned every row they wrote.
    public func applying(_ changes: [SchemaChange]) -> PostgresSchema {
        guard !changes.isEmpty else { return self }
        var settings = self.settings
        for change in changes {
            switch change.kind {
            case .tableCreated:
                // Lower-cased, as the file's own check of two types on one table compares them.
                let taken = settings.recordTypes.contains { $0.table.lowercased() == change.table.lowercased() }
                if settings.mapping(forRecordType: change.recordType) == nil, !taken {
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
