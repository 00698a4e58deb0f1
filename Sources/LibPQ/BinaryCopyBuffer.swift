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
    /// The bytes, in memory of their own rather than an `[UInt8]`: a row is dozens of small
    /// appends (a length word, eight bytes of a bigint), and `Array.append(contentsOf:)` cost
    /// about a hundred instructions each where a store into room made once costs a few
    /// (callgrind: 112 against 16 for a length word). Copy on write, like an array. The place,
    /// size and count are kept here rather than in the owner, whose properties would be checked
    /// for exclusive access at run time on every append.
    @usableFromInline var owner: Owner
    @usableFromInline var base: UnsafeMutablePointer<UInt8>
    @usableFromInline var capacity: Int
    /// How many bytes are written.
    public var count: Int { written }
    @usableFromInline var written = 0

    public init(capacity: Int = 1 << 16) {
        owner = Owner(capacity: max(capacity, 64))
        base = owner.base
        self.capacity = owner.capacity
        appendHeader()
    }

    private mutating func appendHeader() {
        for byte: UInt8 in [0x50, 0x47, 0x43, 0x4F, 0x50, 0x59, 0x0A, 0xFF, 0x0D, 0x0A, 0x00] { append(byte) }
        appendInt32(0)  // flags
        appendInt32(0)  // header extension length
    }

    /// The bytes written, as a new array.
    public var bytes: [UInt8] { withUnsafeBytes { Array($0) } }

    public func withUnsafeBytes<R>(_ body: (UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R {
        try withExtendedLifetime(owner) { try body(UnsafeBufferPointer(start: base, count: written)) }
    }

    /// Where the next `n` bytes go, with room for them; the caller then adds to `count` what it
    /// wrote.
    @inlinable @inline(__always) mutating func room(_ n: Int) -> UnsafeMutablePointer<UInt8> {
        if !isKnownUniquelyReferenced(&owner) {
            moveToNewMemory(capacity: max(capacity, written + n))
        } else if written + n > capacity {
            moveToNewMemory(capacity: max(written + n, capacity * 2))
        }
        return base + written
    }

    /// Kept out of line, so that `room` and the appends built on it stay small enough to inline.
    @inline(never) @usableFromInline mutating func moveToNewMemory(capacity: Int) {
        let moved = Owner(capacity: capacity)
        moved.base.initialize(from: base, count: written)
        owner = moved
        base = moved.base
        self.capacity = capacity
    }

    @inlinable public mutating func append(_ byte: UInt8) {
        room(1).initialize(to: byte)
        written += 1
    }

    @inlinable public mutating func append(_ bytes: UnsafeBufferPointer<UInt8>) {
        guard let source = bytes.baseAddress, bytes.count > 0 else { return }
        room(bytes.count).initialize(from: source, count: bytes.count)
        written += bytes.count
    }

    public mutating func append(contentsOf bytes: [UInt8]) {
        bytes.withUnsafeBufferPointer { append($0) }
    }

    /// Forgets the bytes from `count` on.
    public mutating func truncate(to count: Int) {
        precondition(count >= 0 && count <= written, "truncating \(written) bytes to \(count)")
        written = count
    }

    /// Forgets every byte, keeping the memory.
    public mutating func removeAll() { truncate(to: 0) }

    public mutating func finish() { appendInt16(-1) }

    @inlinable public mutating func beginTuple(fieldCount: Int) { appendInt16(Int16(fieldCount)) }

    @inlinable public mutating func appendInt16(_ v: Int16) {
        UnsafeMutableRawPointer(room(2)).storeBytes(of: UInt16(bitPattern: v).bigEndian, toByteOffset: 0, as: UInt16.self)
        written += 2
    }

    @inlinable public mutating func appendInt32(_ v: Int32) {
        UnsafeMutableRawPointer(room(4)).storeBytes(of: UInt32(bitPattern: v).bigEndian, toByteOffset: 0, as: UInt32.self)
        written += 4
    }

    /// A length word and an eight-byte value, with room made once.
    @inlinable mutating func appendEightByteField(_ v: UInt64) {
        let at = UnsafeMutableRawPointer(room(12))
        at.storeBytes(of: UInt32(8).bigEndian, toByteOffset: 0, as: UInt32.self)
        at.storeBytes(of: v.bigEndian, toByteOffset: 4, as: UInt64.self)
        written += 12
    }

    /// A field of `bytes` after its length word, and `prefix` before them when there is one
    /// (jsonb's version byte), with room made once: a row is mostly such fields, and each room
    /// made is a check of the memory's owner. With the array fields and `appendField(atMost:)`
    /// below, `Benchmarks/`' straight path went from 39,393 to 38,497 instructions a record.
    @inlinable public mutating func appendField(prefix: UInt8? = nil, _ bytes: UnsafeBufferPointer<UInt8>) {
        let head = prefix == nil ? 4 : 5
        let length = head + bytes.count
        let at = room(length)
        UnsafeMutableRawPointer(at).storeBytes(of: UInt32(bitPattern: Int32(length - 4)).bigEndian, toByteOffset: 0, as: UInt32.self)
        if let prefix { at[4] = prefix }
        if let source = bytes.baseAddress, bytes.count > 0 { (at + head).initialize(from: source, count: bytes.count) }
        written += length
    }

    /// A field whose bytes `fill` writes, at most `limit` of them, after its length word, with
    /// room made once; false, and nothing written, when `fill` returns nil.
    public mutating func appendField(atMost limit: Int, _ fill: (UnsafeMutableBufferPointer<UInt8>) -> Int?) -> Bool {
        let at = room(4 + limit)
        guard let filled = fill(UnsafeMutableBufferPointer(start: at + 4, count: limit)) else { return false }
        precondition(filled >= 0 && filled <= limit, "wrote \(filled) bytes where \(limit) were allowed")
        UnsafeMutableRawPointer(at).storeBytes(of: UInt32(bitPattern: Int32(filled)).bigEndian, toByteOffset: 0, as: UInt32.self)
        written += 4 + filled
        return true
    }

    /// Begins a one-dimensional array field of elements counted as they are written: its length
    /// word and header with room made once. Returns where the field starts, for `endArrayField`.
    @inlinable public mutating func beginArrayField(elementOID: Int32, hasNull: Bool = false) -> Int {
        let start = written
        let at = UnsafeMutableRawPointer(room(24))
        at.storeBytes(of: UInt32(0), toByteOffset: 0, as: UInt32.self)  // the length, set at the end
        at.storeBytes(of: UInt32(1).bigEndian, toByteOffset: 4, as: UInt32.self)  // dimensions
        at.storeBytes(of: UInt32(hasNull ? 1 : 0).bigEndian, toByteOffset: 8, as: UInt32.self)
        at.storeBytes(of: UInt32(bitPattern: elementOID).bigEndian, toByteOffset: 12, as: UInt32.self)
        at.storeBytes(of: UInt32(0), toByteOffset: 16, as: UInt32.self)  // the count, set at the end
        at.storeBytes(of: UInt32(1).bigEndian, toByteOffset: 20, as: UInt32.self)  // lower bound
        written += 24
        return start
    }

    /// Sets the length word and the element count of the array field begun at `start`, once its
    /// elements are written.
    public mutating func endArrayField(at start: Int, count: Int32) {
        precondition(start >= 0 && start + 24 <= written, "ending an array at \(start) of \(written) bytes")
        if !isKnownUniquelyReferenced(&owner) { moveToNewMemory(capacity: capacity) }
        let at = UnsafeMutableRawPointer(base + start)
        at.storeBytes(of: UInt32(bitPattern: Int32(written - start - 4)).bigEndian, toByteOffset: 0, as: UInt32.self)
        at.storeBytes(of: UInt32(bitPattern: count).bigEndian, toByteOffset: 16, as: UInt32.self)
    }

    /// An empty array field: no dimensions (ndim 0, no null flag, the element type).
    public mutating func appendEmptyArrayField(elementOID: Int32) {
        let at = UnsafeMutableRawPointer(room(16))
        at.storeBytes(of: UInt32(12).bigEndian, toByteOffset: 0, as: UInt32.self)
        at.storeBytes(of: UInt32(0), toByteOffset: 4, as: UInt32.self)
        at.storeBytes(of: UInt32(0), toByteOffset: 8, as: UInt32.self)
        at.storeBytes(of: UInt32(bitPattern: elementOID).bigEndian, toByteOffset: 12, as: UInt32.self)
        written += 16
    }

    /// Owns the memory, which it frees when the last buffer using it is gone.
    @usableFromInline final class Owner {
        @usableFromInline let base: UnsafeMutablePointer<UInt8>
        @usableFromInline let capacity: Int

        @usableFromInline init(capacity: Int) {
            base = .allocate(capacity: capacity)
            self.capacity = capacity
        }

        deinit { base.deallocate() }
    }

    // MARK: Fields (each with its length word)

    @inlinable public mutating func appendNull() { appendInt32(-1) }

    public mutating func append(text: String) {
        var text = text
        text.withUTF8 { appendField($0) }
    }

    public mutating func append(text: String?) {
        if let text { append(text: text) } else { appendNull() }
    }

    @inlinable public mutating func append(bigint: Int64) {
        appendEightByteField(UInt64(bitPattern: bigint))
    }

    public mutating func append(integer: Int32) {
        appendInt32(4)
        appendInt32(integer)
    }

    public mutating func append(boolean: Bool) {
        appendInt32(1)
        append(boolean ? 1 : 0)
    }

    @inlinable public mutating func append(double: Double) {
        appendEightByteField(double.bitPattern)
    }

    /// `timestamptz` is microseconds since 2000-01-01 00:00:00 UTC.
    @inlinable public mutating func append(timestampMicroseconds: Int64) {
        appendEightByteField(UInt64(bitPattern: timestampMicroseconds))
    }

    public mutating func append(bytea: [UInt8]) {
        bytea.withUnsafeBufferPointer { appendField($0) }
    }

    /// `jsonb` binary format: a version byte (1) and the JSON text.
    public mutating func append(jsonb json: [UInt8]) {
        json.withUnsafeBufferPointer { appendField(prefix: 1, $0) }
    }

    /// A one-dimensional array of `count` elements, which `elements` writes.
    /// > array_send: ndim, has-null flag, element type OID, then per dimension its size and lower
    /// > bound, then each element as length + data.
    public mutating func appendArray(elementOID: Int32, count: Int, hasNull: Bool = false, _ elements: (inout BinaryCopyBuffer) -> Void) {
        let start = beginArrayField(elementOID: elementOID, hasNull: hasNull)
        elements(&self)
        endArrayField(at: start, count: Int32(count))
    }

    /// Empties the buffer, keeping its memory, and writes the stream's header again.
    public mutating func reset() {
        removeAll()
        appendHeader()
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
/// pipeline file or a server goes through here. Its quotes are found by their bytes, as
/// PostgreSQL reads them (see `replacingAll`): a name such as `a"\u{301}` or `\u{600}"` hides
/// its quote inside a larger `Character`, and quoting by Characters left that quote single, to
/// end the name and let the rest run as SQL.
public func quoteIdentifier(_ name: String) -> String {
    "\"" + name.replacingAll("\"", with: "\"\"") + "\""
}

extension String {
    /// Every occurrence of `target` replaced, found by its UTF-8 bytes (Foundation-free), never
    /// by `Character`s: where a combining mark follows the target, or a prepended one comes
    /// before it, the text's Character is not the target's, and a Character search passes it
    /// by. In valid UTF-8 a match begins and ends between scalars, so the result is valid too.
    func replacingAll(_ target: String, with replacement: String) -> String {
        let wanted = Array(target.utf8)
        guard let first = wanted.first else { return self }
        let bytes = Array(utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count + 2)
        var i = 0
        while i < bytes.count {
            if bytes[i] == first, bytes.count - i >= wanted.count, bytes[i..<i + wanted.count].elementsEqual(wanted) {
                out.append(contentsOf: replacement.utf8)
                i += wanted.count
            } else {
                out.append(bytes[i])
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
