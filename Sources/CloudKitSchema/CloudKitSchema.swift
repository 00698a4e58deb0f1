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

/// Where something is in a `.ckdb` file: 1-based line, and column in Unicode scalars.
public struct SchemaPosition: Sendable, Hashable {
    public var line: Int
    public var column: Int

    public init(line: Int, column: Int) {
        self.line = line
        self.column = column
    }
}

public struct RecordTypeDefinition: Sendable, Hashable {
    public var name: String
    /// The user's fields, in file order; the implicit system fields (`___createTime` and the
    /// others, whose values every record carries anyway) are in `systemFields`.
    public var fields: [FieldDefinition]
    public var systemFields: [FieldDefinition]
    public var grants: [Grant]
    public var position: SchemaPosition

    public init(
        name: String, fields: [FieldDefinition] = [], systemFields: [FieldDefinition] = [], grants: [Grant] = [],
        position: SchemaPosition = SchemaPosition(line: 0, column: 0)
    ) {
        self.name = name
        self.fields = fields
        self.systemFields = systemFields
        self.grants = grants
        self.position = position
    }

    public subscript(field name: String) -> FieldDefinition? { fields.first { $0.name == name } }

    /// System fields are written quoted with three underscores: `"___createTime"`.
    public static func isSystemField(_ name: String) -> Bool { name.hasPrefix("___") }
}

public struct FieldDefinition: Sendable, Hashable {
    public var name: String
    public var type: FieldType
    public var options: FieldOptions
    public var position: SchemaPosition

    public init(name: String, type: FieldType, options: FieldOptions = [], position: SchemaPosition = SchemaPosition(line: 0, column: 0)) {
        self.name = name
        self.type = type
        self.options = options
        self.position = position
    }
}

/// `QUERYABLE`, `SORTABLE`, `SEARCHABLE`: the indexes CloudKit keeps for a field.
public struct FieldOptions: OptionSet, Sendable, Hashable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let queryable = FieldOptions(rawValue: 1)
    public static let sortable = FieldOptions(rawValue: 2)
    public static let searchable = FieldOptions(rawValue: 4)

    /// The options' keywords, in the order the exports write them.
    public var keywords: [String] {
        [(FieldOptions.queryable, "QUERYABLE"), (.searchable, "SEARCHABLE"), (.sortable, "SORTABLE")].filter { contains($0.0) }.map(\.1)
    }
}

/// A field's type: a primitive, perhaps `ENCRYPTED`, perhaps in a `LIST<…>`.
public struct FieldType: Sendable, Hashable, CustomStringConvertible {
    public enum Primitive: String, Sendable, Hashable, CaseIterable {
        case asset = "ASSET"
        case bytes = "BYTES"
        case double = "DOUBLE"
        case int64 = "INT64"
        case location = "LOCATION"
        case number = "NUMBER"
        case reference = "REFERENCE"
        case string = "STRING"
        case timestamp = "TIMESTAMP"

        /// The primitives `ENCRYPTED` may qualify.
        public static let encryptable: [Primitive] = [.bytes, .string, .double, .int64, .location, .timestamp]
    }

    public var primitive: Primitive
    public var encrypted: Bool
    /// `NUMBER PREFERRED AS INT64` or `… AS DOUBLE`; nil otherwise.
    public var preferred: Primitive?
    public var isList: Bool

    public init(_ primitive: Primitive, encrypted: Bool = false, preferred: Primitive? = nil, isList: Bool = false) {
        self.primitive = primitive
        self.encrypted = encrypted
        self.preferred = preferred
        self.isList = isList
    }

    /// As the schema language writes it: `LIST<ENCRYPTED STRING>`, `NUMBER PREFERRED AS INT64`.
    public var description: String {
        var text = (encrypted ? "ENCRYPTED " : "") + primitive.rawValue
        if let preferred { text += " PREFERRED AS \(preferred.rawValue)" }
        return isList ? "LIST<\(text)>" : text
    }

    /// The type tag CloudKit Web Services sends with such a field's values (`STRING`,
    /// `INT64_LIST`, `ASSETID`, `ENCRYPTED_BYTES`). A `NUMBER` is sent as what it is preferred
    /// as, `DOUBLE` when nothing is preferred; an encrypted value travels decrypted, with its
    /// plain tag, except bytes (`ENCRYPTED_BYTES` has been observed).
    public var typeTag: String {
        var tag: String
        switch primitive {
        case .asset: tag = "ASSETID"
        case .number: tag = (preferred ?? .double).rawValue
        case .bytes where encrypted: tag = "ENCRYPTED_BYTES"
        default: tag = primitive.rawValue
        }
        if isList { tag += "_LIST" }
        return tag
    }
}

/// `GRANT READ, WRITE TO role`.
public struct Grant: Sendable, Hashable {
    public enum Privilege: String, Sendable, Hashable, CaseIterable {
        case read = "READ"
        case create = "CREATE"
        case write = "WRITE"
    }

    public var privileges: [Privilege]
    public var role: String

    public init(privileges: [Privilege], role: String) {
        self.privileges = privileges
        self.role = role
    }
}
