/// A `RECORD TYPE`: its fields and grants.
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
