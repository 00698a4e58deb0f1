import RecordMapping

/// A record type's table and columns, in PostgreSQL's column types.
public typealias PostgresRecordTypeMapping = RecordTypeMapping<ColumnType>
/// A field's column, of a PostgreSQL column type.
public typealias PostgresFieldMapping = FieldMapping<ColumnType>

extension RecordTypeMapping where Column == ColumnType {
    /// The most columns of fields schema evolution gives a table; fields past it stay unmapped
    /// (in `fields`, with `unmappedFields: keep`). PostgreSQL takes 1,600 columns, but a row must
    /// fit in a page of 8 kB, where each value takes at least a few bytes and a long one moved
    /// out of line 18: 400 columns all filled still fit, 1,600 would not.
    public static var maxEvolvedColumns: Int { 400 }
}
