/// A field of a record type: its name, type and options.
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
