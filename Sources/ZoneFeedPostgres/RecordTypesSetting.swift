/// What `recordTypes` says: written-out mappings, a schema file's, or `auto`.
struct RecordTypesSetting {
    var mappings: [PostgresRecordTypeMapping] = []
    var schemaFile: String?
    var auto = false
    var stripsCoreDataPrefix = false
    var skipped: Set<String> = []
    /// The system-field indexes the schema file declares, by mapped record type.
    var systemIndexes: [String: Set<String>]?
}
