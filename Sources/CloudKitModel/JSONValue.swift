#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Any JSON value, kept as received: used for field values zonefeed does not interpret (assets,
/// locations, unknown types) so that nothing CloudKit sends is dropped.
public enum JSONValue: Sendable, Hashable, Codable {
    case null
    case bool(Bool)
    /// An integer that fits Int64 exactly (CloudKit's INT64 values go beyond 2^53).
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    /// One JSON text, read whole in one pass with `JSONReader`, its nesting bounded: the way to
    /// read a value from outside. Throws for anything else, or more, in `bytes`.
    public init(parsing bytes: UnsafeRawBufferPointer) throws {
        var reader = JSONReader(bytes.bindMemory(to: UInt8.self))
        self = try reader.readValue()
        try reader.end()
    }

    /// Through a `Decoder`, each level tries every type in turn, and each miss throws an error
    /// that carries the path so far: JSON nested 500 deep took 2 s a kilobyte through
    /// `JSONDecoder`. For values zonefeed writes itself; `init(parsing:)` reads what comes from
    /// outside.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() {
            self = .null
        } else if let v = try? c.decode(Bool.self) {
            self = .bool(v)
        } else if let v = try? c.decode(Int64.self) {
            self = .int(v)
        } else if let v = try? c.decode(Double.self) {
            self = .double(v)
        } else if let v = try? c.decode(String.self) {
            self = .string(v)
        } else if let v = try? c.decode([JSONValue].self) {
            self = .array(v)
        } else {
            self = .object(try c.decode([String: JSONValue].self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .null: try c.encodeNil()
        case .bool(let v): try c.encode(v)
        case .int(let v): try c.encode(v)
        case .double(let v): try c.encode(v)
        case .string(let v): try c.encode(v)
        case .array(let v): try c.encode(v)
        case .object(let v): try c.encode(v)
        }
    }

    public subscript(key: String) -> JSONValue? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    /// Whether any string in this value (keys included) contains a NUL character, which neither
    /// PostgreSQL `text` nor `jsonb` can hold.
    public var containsNUL: Bool {
        switch self {
        case .null, .bool, .int, .double: return false
        case .string(let s): return s.containsNUL
        case .array(let items): return items.contains { $0.containsNUL }
        case .object(let members): return members.contains { $0.key.containsNUL || $0.value.containsNUL }
        }
    }
}

extension StringProtocol {
    /// Whether the string holds a NUL character, which PostgreSQL `text` and `jsonb` cannot hold.
    /// Asked of every text value written, so it scans the UTF-8 bytes with `memchr` rather than
    /// `utf8.contains(0)`, which walks them one at a time through the generic `Sequence` path.
    public var containsNUL: Bool {
        utf8.withContiguousStorageIfAvailable(containNUL) ?? utf8.contains(0)
    }
}

extension String {
    /// `StringProtocol.containsNUL` for a String, through `withUTF8`: the protocol's way calls
    /// the standard library's unspecialized `withContiguousStorageIfAvailable`, about 270
    /// instructions for a record's name (callgrind, `Benchmarks/`).
    public var containsNUL: Bool {
        var text = self
        return text.withUTF8(containNUL)
    }
}

extension UnsafeBufferPointer<UInt8> {
    /// Whether the bytes hold a zero: `String.containsNUL` for text at hand as UTF-8, for a
    /// writer that copies the bytes it looks at.
    package var containsNUL: Bool { containNUL(self) }
}

/// Whether the bytes hold a zero.
private func containNUL(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
    guard let base = bytes.baseAddress, !bytes.isEmpty else { return false }
    return memchr(base, 0, bytes.count) != nil
}
