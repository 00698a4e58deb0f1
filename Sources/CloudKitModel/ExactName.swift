/// A name compared and hashed by its UTF-8 bytes, as CloudKit and PostgreSQL (whose
/// deterministic collations break ties by bytes) tell names apart. Swift's `String` equality is
/// canonical equivalence: `café` with a composed é and `cafe` followed by a combining accent are
/// one string to it, so as dictionary keys two records or zones that the server and the
/// database keep apart became one (a deletion of one was taken for the other's, a record at a
/// query's tie was dropped as seen).
public struct ExactName: Hashable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
    public var text: String

    public init(_ text: String) { self.text = text }

    public init(stringLiteral text: String) { self.text = text }

    public var description: String { text }

    public static func == (lhs: ExactName, rhs: ExactName) -> Bool { same(lhs.text, rhs.text) }

    public func hash(into hasher: inout Hasher) { Self.hash(text, into: &hasher) }

    /// Whether the two texts are the same bytes.
    @inlinable public static func same(_ a: String, _ b: String) -> Bool {
        a.utf8.count == b.utf8.count && a.utf8.elementsEqual(b.utf8)
    }

    /// Feeds the text's bytes and their count (so that two texts hashed in a row stay apart).
    public static func hash(_ text: String, into hasher: inout Hasher) {
        var text = text
        text.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
        hasher.combine(text.utf8.count)
    }
}
