/// An opaque server change token. Database tokens and zone tokens are not interchangeable, so the
/// checkpoints keep them apart by scope; nothing ever looks inside one.
public struct ChangeToken: Sendable, Hashable, CustomStringConvertible {
    public var value: String
    public init(_ value: String) { self.value = value }
    /// Tokens are not secret, but they are long and meaningless to a reader.
    public var description: String { value.count > 16 ? String(value.prefix(12)) + "…" : value }
}
