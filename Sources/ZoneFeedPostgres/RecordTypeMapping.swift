/// How one record type becomes rows: its table, and the fields that get columns of their own.
public struct RecordTypeMapping: Sendable {
    /// The most columns of fields schema evolution gives a table; fields past it stay unmapped
    /// (in `fields`, with `unmappedFields: keep`). PostgreSQL takes 1,600 columns, but a row must
    /// fit in a page of 8 kB, where each value takes at least a few bytes and a long one moved
    /// out of line 18: 400 columns all filled still fit, 1,600 would not.
    public static let maxEvolvedColumns = 400

    public var recordType: String
    public var table: String
    public var fields: [FieldMapping]
    /// The table, when its name is not the plain snake_case of the record type, and why (a
    /// mapping derived from a schema file; `validate` shows it).
    public var renamedTable: IdentifierNames.Renamed?
    /// The columns whose names are not the plain snake_case of their fields, and why.
    public var renamed: [IdentifierNames.Renamed] = []
    /// Fields kept out of columns even when the schema evolves (a schema file's `omit`).
    public var omittedFields: Set<String> = []

    public init(recordType: String, table: String, fields: [FieldMapping] = []) {
        self.recordType = recordType
        self.table = table
        self.fields = fields
    }
}

public struct FieldMapping: Sendable, Hashable {
    /// The CloudKit field name.
    public var field: String
    /// The column name (the field name in snake_case unless given).
    public var column: String
    public var type: ColumnType
    /// A b-tree index on the column (from a schema file's QUERYABLE or SORTABLE, when asked).
    public var indexed: Bool
    /// For a column made by schema evolution: the CloudKit type it was made for, the only one
    /// it takes (a column of a written-out mapping or a schema file takes what fits its type).
    public var cloudKitType: String?

    public init(field: String, column: String, type: ColumnType, indexed: Bool = false) {
        self.field = field
        self.column = column
        self.type = type
        self.indexed = indexed
    }
}
