/// A value that must never be printed: tokens, passwords, connection strings.
public struct Secret: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible {
    public var value: String
    public init(_ value: String) { self.value = value }
    public var description: String { "<redacted>" }
    public var debugDescription: String { "<redacted>" }
}
