/// A CloudKit schema as `cktool export-schema` writes it in the CloudKit Schema Language (a
/// `.ckdb` file): the roles and the record types with their fields. Grants are read and kept,
/// though nothing in zonefeed acts on them.
///
///     DEFINE SCHEMA
///         CREATE ROLE moderator;
///         RECORD TYPE Note (
///             "___recordID" REFERENCE QUERYABLE,
///             title         STRING QUERYABLE SEARCHABLE SORTABLE,
///             tags          LIST<STRING>,
///             GRANT READ TO "_world"
///         );
///
/// `CloudKitSchema(parsing:)` reads one; see `SchemaReader` for the grammar.
public struct CloudKitSchema: Sendable, Hashable {
    /// The roles the file creates (`CREATE ROLE`), in file order.
    public var roles: [String]
    /// The record types, in file order.
    public var recordTypes: [RecordTypeDefinition]

    public init(roles: [String] = [], recordTypes: [RecordTypeDefinition] = []) {
        self.roles = roles
        self.recordTypes = recordTypes
    }

    /// Reads `.ckdb` text; throws `SchemaSyntaxError` (line and column) at the first problem.
    public init(parsing text: String) throws(SchemaSyntaxError) {
        var reader = SchemaReader(text)
        self = try reader.readSchema()
    }

    public subscript(recordType name: String) -> RecordTypeDefinition? { recordTypes.first { $0.name == name } }
}
