/// A `.ckdb` file that does not parse: where, and what was expected. Printed by the caller with
/// the file's name in front, `schema.ckdb:12:9: …`, as compilers print theirs.
public struct SchemaSyntaxError: Error, Sendable, Hashable, CustomStringConvertible {
    public var position: SchemaPosition
    /// What is wrong, as a sentence.
    public var message: String

    public init(_ message: String, at position: SchemaPosition) {
        self.message = message
        self.position = position
    }

    public var description: String { "\(position.line):\(position.column): \(message)" }
}
