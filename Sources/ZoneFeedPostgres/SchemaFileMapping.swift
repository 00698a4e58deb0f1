import CloudKitSchema

/// `recordTypes: { schemaFile: … }`: a table for each record type of a CloudKit schema file
/// (`cktool export-schema`'s `.ckdb`) and a typed column for each of its fields, with the
/// overrides the pipeline file gives.
///
///     recordTypes:
///       schemaFile: cloudkit/schema.ckdb   # relative to the pipeline file
///       stripCoreDataPrefix: true          # CD_Note → table note, CD_title → column title
///       indexes: queryable                 # none (default) | queryable: QUERYABLE or SORTABLE fields
///                                          #   (b-tree; hash for text; none for bytea, jsonb, arrays)
///       skip: [Users]                      # record types left out
///       override:
///         Note:
///           table: notes
///           fields:
///             body: { column: body_text }  # a column, a type, or both
///             thumbnail: omit              # left to the fields jsonb column
public struct SchemaFileMapping: Sendable {
    public enum Indexes: String, Sendable, CaseIterable { case none, queryable }

    public enum FieldOverride: Sendable, Hashable {
        case omit
        case column(name: String?, type: ColumnType?)
    }

    public struct Override: Sendable {
        public var table: String?
        public var fields: [String: FieldOverride] = [:]

        public init(table: String? = nil, fields: [String: FieldOverride] = [:]) {
            self.table = table
            self.fields = fields
        }
    }

    public var stripCoreDataPrefix = false
    public var indexes: Indexes = .none
    public var skip: Set<String> = []
    public var overrides: [String: Override] = [:]

    public init(stripCoreDataPrefix: Bool = false, indexes: Indexes = .none, skip: Set<String> = [], overrides: [String: Override] = [:]) {
        self.stripCoreDataPrefix = stripCoreDataPrefix
        self.indexes = indexes
        self.skip = skip
        self.overrides = overrides
    }

    /// Core Data's prefix on the record types and fields of NSPersistentCloudKitContainer.
    public static let coreDataPrefix = "CD_"

    /// The table names zonefeed keeps for itself are avoided: `ck_` goes in front of a record
    /// type that would start with `zonefeed_`, and a suffix after one that would end in `_live`
    /// (the views) or `_pkey` (PostgreSQL's name for a table's primary key index).
    static let tableNames = IdentifierNames(maxBytes: 63 - "_live".utf8.count, reservedEndings: ["_live", "_pkey"])
    /// `seq` is the staging tables' own column (see `PostgresSchema.stagingTableDDL`); `xmin`, `ctid`
    /// and the others are PostgreSQL's, which no table may have a column of.
    static let columnNames = IdentifierNames(maxBytes: 63, reserved: Set(systemColumns + postgresSystemColumns + [stagingSequenceColumn]))

    func stripped(_ name: String) -> String {
        stripCoreDataPrefix && name.hasPrefix(Self.coreDataPrefix) && name.count > Self.coreDataPrefix.count
            ? String(name.dropFirst(Self.coreDataPrefix.count)) : name
    }

    func plainTable(_ recordType: String) -> String {
        let name = stripped(recordType).snakeCased
        return name.lowercased().hasPrefix("zonefeed_") ? "ck_" + name : name
    }

    /// The mappings, in the schema file's order, each with what was renamed and why.
    public func mappings(from schema: CloudKitSchema) -> [PostgresRecordTypeMapping] {
        let recordTypes = schema.recordTypes.filter { !skip.contains($0.name) }
        let explicitTables = Set(recordTypes.compactMap { overrides[$0.name]?.table })
        let named = recordTypes.filter { overrides[$0.name]?.table == nil }
        let (tables, renamedTables) = Self.tableNames.names(for: named.map(\.name), taken: explicitTables, plain: plainTable)
        // By name, made once: a search of the renamed tables at each record type was quadratic.
        let renamedTableOf = Dictionary(renamedTables.map { ($0.cloudKitName, $0) }, uniquingKeysWith: { first, _ in first })
        return recordTypes.map { recordType in
            let override = overrides[recordType.name] ?? Override()
            let fields = recordType.fields.filter { override.fields[$0.name] != .omit }
            var explicitColumns: [String: String] = [:]
            for field in fields {
                if case .column(let name?, _) = override.fields[field.name] { explicitColumns[field.name] = name }
            }
            let (columns, renamed) = Self.columnNames.names(
                for: fields.map(\.name).filter { explicitColumns[$0] == nil }, taken: Set(explicitColumns.values)
            ) { stripped($0).snakeCased }
            let mapped = fields.map { field in
                var type = ColumnType.default(forTypeTag: field.type.typeTag)
                if case .column(_, let given?) = override.fields[field.name] { type = given }
                let indexed = indexes == .queryable && !field.options.isDisjoint(with: [.queryable, .sortable]) && type.isIndexable
                return PostgresFieldMapping(field: field.name, column: explicitColumns[field.name] ?? columns[field.name]!, type: type, indexed: indexed)
            }
            var mapping = PostgresRecordTypeMapping(recordType: recordType.name, table: override.table ?? tables[recordType.name]!, fields: mapped)
            mapping.renamedTable = renamedTableOf[recordType.name]
            mapping.renamed = renamed
            mapping.omittedFields = Set(override.fields.filter { $0.value == .omit }.keys)
            return mapping
        }
    }
}
