/// How one record type becomes rows of a destination: its table, and the fields that get
/// columns of their own, each of the destination's `Column` type (PostgreSQL's `ColumnType`).
/// The names are the destination's, made by its own identifier rules; what a mapping says is
/// not.
public struct RecordTypeMapping<Column: Sendable & Hashable>: Sendable {
    public var recordType: String
    public var table: String
    public var fields: [FieldMapping<Column>]
    /// The table, when its name is not the plain form of the record type's, and why (a mapping
    /// derived from a schema file; `validate` shows it).
    public var renamedTable: RenamedName?
    /// The columns whose names are not the plain forms of their fields', and why.
    public var renamed: [RenamedName] = []
    /// Fields kept out of columns even when the schema evolves (a schema file's `omit`).
    public var omittedFields: Set<String> = []

    public init(recordType: String, table: String, fields: [FieldMapping<Column>] = []) {
        self.recordType = recordType
        self.table = table
        self.fields = fields
    }
}

/// One field's column.
public struct FieldMapping<Column: Sendable & Hashable>: Sendable, Hashable {
    /// The CloudKit field name.
    public var field: String
    /// The column name.
    public var column: String
    public var type: Column
    /// An index on the column (from a schema file's QUERYABLE or SORTABLE, when asked).
    public var indexed: Bool
    /// For a column made by schema evolution: the CloudKit type it was made for, the only one
    /// it takes (a column of a written-out mapping or a schema file takes what fits its type).
    public var cloudKitType: String?

    public init(field: String, column: String, type: Column, indexed: Bool = false) {
        self.field = field
        self.column = column
        self.type = type
        self.indexed = indexed
    }
}
