/// How one record type becomes rows: its table, and the fields that get columns of their own.
public struct RecordTypeMapping: Sendable {
    public var recordType: String
    public var table: String
    public var fields: [FieldMapping]

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

    public init(field: String, column: String, type: ColumnType) {
        self.field = field
        self.column = column
        self.type = type
    }
}
