/// Builds the binary `COPY` format: a signature, tuples of length-prefixed fields in network byte
/// order, and a trailer. Values are written in PostgreSQL's binary send format, so nothing is
/// formatted as text or escaped on the hot path.
///
/// > "The file header consists of 15 bytes of fixed fields, followed by a variable-length header
/// > extension area. The fixed fields are: Signature — 11-byte sequence PGCOPY\n\377\r\n\0 …
/// > Flags field — 32-bit integer … Header extension area length — 32-bit integer"
/// > "Each tuple begins with a 16-bit integer count of the number of fields in the tuple. …
/// > Then, repeated for each field in the tuple, there is a 32-bit length word followed by that
/// > many bytes of field data. … As a special case, -1 indicates a NULL field value."
/// > "The file trailer consists of a 16-bit integer word containing -1."
public struct BinaryCopyBuffer {
    public var bytes: [UInt8] = []

    public init(capacity: Int = 1 << 16) {
        bytes.reserveCapacity(capacity)
        bytes.append(contentsOf: [0x50, 0x47, 0x43, 0x4F, 0x50, 0x59, 0x0A, 0xFF, 0x0D, 0x0A, 0x00])
        appendInt32(0)  // flags
        appendInt32(0)  // header extension length
    }

    public mutating func finish() { appendInt16(-1) }

    @inline(__always) public mutating func beginTuple(fieldCount: Int) { appendInt16(Int16(fieldCount)) }

    @inline(__always) public mutating func appendInt16(_ v: Int16) {
        let u = UInt16(bitPattern: v).bigEndian
        withUnsafeBytes(of: u) { bytes.append(contentsOf: $0) }
    }

    @inline(__always) public mutating func appendInt32(_ v: Int32) {
        let u = UInt32(bitPattern: v).bigEndian
        withUnsafeBytes(of: u) { bytes.append(contentsOf: $0) }
    }

    @inline(__always) public mutating func appendInt64(_ v: Int64) {
        let u = UInt64(bitPattern: v).bigEndian
        withUnsafeBytes(of: u) { bytes.append(contentsOf: $0) }
    }

    // MARK: Fields (each with its length word)

    public mutating func appendNull() { appendInt32(-1) }

    public mutating func append(text: String) {
        var text = text
        text.withUTF8 { utf8 in
            appendInt32(Int32(utf8.count))
            bytes.append(contentsOf: utf8)
        }
    }

    public mutating func append(text: String?) {
        if let text { append(text: text) } else { appendNull() }
    }

    public mutating func append(bigint: Int64) {
        appendInt32(8)
        appendInt64(bigint)
    }

    public mutating func append(integer: Int32) {
        appendInt32(4)
        appendInt32(integer)
    }

    public mutating func append(boolean: Bool) {
        appendInt32(1)
        bytes.append(boolean ? 1 : 0)
    }

    public mutating func append(double: Double) {
        appendInt32(8)
        appendInt64(Int64(bitPattern: double.bitPattern))
    }

    /// `timestamptz` is microseconds since 2000-01-01 00:00:00 UTC.
    public mutating func append(timestampMicroseconds: Int64) {
        appendInt32(8)
        appendInt64(timestampMicroseconds)
    }

    public mutating func append(bytea: [UInt8]) {
        appendInt32(Int32(bytea.count))
        bytes.append(contentsOf: bytea)
    }

    /// `jsonb` binary format: a version byte (1) and the JSON text.
    public mutating func append(jsonb json: [UInt8]) {
        appendInt32(Int32(json.count + 1))
        bytes.append(1)
        bytes.append(contentsOf: json)
    }

    /// A one-dimensional array: the length word is patched once the elements are written.
    /// > array_send: ndim, has-null flag, element type OID, then per dimension its size and lower
    /// > bound, then each element as length + data.
    public mutating func appendArray(elementOID: Int32, count: Int, hasNull: Bool = false, _ elements: (inout BinaryCopyBuffer) -> Void) {
        let lengthAt = bytes.count
        appendInt32(0)
        let start = bytes.count
        appendInt32(1)
        appendInt32(hasNull ? 1 : 0)
        appendInt32(elementOID)
        appendInt32(Int32(count))
        appendInt32(1)
        elements(&self)
        let length = UInt32(bytes.count - start).bigEndian
        withUnsafeBytes(of: length) { raw in
            for i in 0..<4 { bytes[lengthAt + i] = raw[i] }
        }
    }

    public mutating func reset() {
        bytes.removeAll(keepingCapacity: true)
        self = BinaryCopyBuffer(reusing: bytes)
    }

    private init(reusing storage: [UInt8]) {
        bytes = storage
        bytes.append(contentsOf: [0x50, 0x47, 0x43, 0x4F, 0x50, 0x59, 0x0A, 0xFF, 0x0D, 0x0A, 0x00])
        appendInt32(0)
        appendInt32(0)
    }

    public enum OID {
        public static let bool: Int32 = 16
        public static let bytea: Int32 = 17
        public static let int8: Int32 = 20
        public static let text: Int32 = 25
        public static let float8: Int32 = 701
        public static let timestamptz: Int32 = 1184
    }
}

/// Quotes an SQL identifier (`"a""b"`): every table, column and schema name zonefeed takes from a
/// pipeline file or a server goes through here.
public func quoteIdentifier(_ name: String) -> String {
    "\"" + name.replacingAll("\"", with: "\"\"") + "\""
}

extension String {
    /// Every occurrence of `target` replaced (Foundation-free).
    func replacingAll(_ target: String, with replacement: String) -> String {
        guard !target.isEmpty else { return self }
        var out = ""
        var rest = Substring(self)
        while let range = rest.firstRange(of: target) {
            out += rest[..<range.lowerBound]
            out += replacement
            rest = rest[range.upperBound...]
        }
        return out + rest
    }

    func replacingAll(_ target: Character, with replacement: String) -> String {
        var out = ""
        out.reserveCapacity(count + 2)
        for c in self {
            if c == target { out += replacement } else { out.append(c) }
        }
        return out
    }
}
