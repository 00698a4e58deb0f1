#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A pull parser over JSON bytes (RFC 8259), for decoding change pages straight into the model:
/// no intermediate tree for the shapes zonefeed knows, no thrown-and-caught errors to find a
/// value's kind, and integers kept exact as Int64. Foundation's `JSONDecoder` spent most of a
/// page's decoding time on `JSONValue`'s `try?` probes and per-field containers.
///
/// Objects and arrays are walked with `beginObject`/`nextKey` and `beginArray`/`nextElement`;
/// the caller reads or skips each value.
public struct JSONReader {
    // Usable from inlinable code, so that a destination's reads of kept fields (`readString`,
    // `peek`) are compiled into its own loops rather than called across modules with a closure
    // for each run of text (`Benchmarks/`: see docs/performance.md).
    @usableFromInline let bytes: UnsafeBufferPointer<UInt8>
    @usableFromInline var position = 0
    /// The body the bytes belong to, when records read from them may point into it (`RawFields`).
    public let owner: JSONBytes?
    /// The strings read so far that recur from record to record of a page (types, users,
    /// devices, zones), when reading a response (`readRecurringString`).
    let recurring: RecurringStrings?
    /// Nesting depth, bounded so that hostile input cannot exhaust the stack.
    private var depth = 0
    /// How many strings so far were not valid text: bytes that are not UTF-8, or an escape of
    /// half a surrogate pair. Each is read with U+FFFD in place of what could not be read; a
    /// caller that must not change a name (an identity) compares this before and after.
    public private(set) var repairedStrings = 0
    /// The bytes of records' `fields` read into the model (`FieldValue`s) rather than kept as
    /// the page's JSON (`RawFields`), which take more memory than their JSON: about
    /// `modelBytesPerJSONByte` times as much for the densest, a list of small numbers.
    public internal(set) var fieldBytesReadIntoModel = 0
    /// A list of small numbers takes 2 bytes of JSON an element (`0,`) and a `FieldValue` of 24
    /// bytes in the model: measured, a page of 8 MB of such a list held 92-123 MB more resident
    /// once read.
    public static let modelBytesPerJSONByte = 12
    /// What the records read so far hold in memory, counted as the bytes read: the whole body,
    /// and `modelBytesPerJSONByte` times the fields read into the model.
    public var bytesHeld: Int { bytes.count + fieldBytesReadIntoModel * Self.modelBytesPerJSONByte }
    private static let maxDepth = 512

    /// What went wrong and at which byte; never the data itself.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var message: String
        public var offset: Int
        public var description: String { "\(message) at byte \(offset)" }
    }

    /// Reads `bytes`, which must stay valid while the reader is used (`withUnsafeBufferPointer`).
    public init(_ bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
        self.owner = nil
        self.recurring = nil
    }

    /// Reads the bytes of `owner`, which keeps them valid.
    init(_ bytes: UnsafeBufferPointer<UInt8>, owner: JSONBytes) {
        self.bytes = bytes
        self.owner = owner
        self.recurring = RecurringStrings()
    }

    public func failure(_ message: String) -> Failure { Failure(message: message, offset: position) }

    // MARK: Guessing

    /// The value of the last member `"key": value` that begins in the data's last `window` bytes,
    /// found by searching backwards, without reading what comes before. A guess: the member may
    /// belong to a nested object. For a caller that checks it against a proper reading later.
    public static func lastMember<T>(
        _ key: String, in bytes: UnsafeBufferPointer<UInt8>, window: Int = 4096, _ read: (inout JSONReader) throws -> T
    ) -> T? {
        let pattern = Array("\"\(key)\"".utf8)
        var start = bytes.count - pattern.count
        let lowest = max(0, bytes.count - window)
        while start >= lowest {
            if bytes[start] == pattern[0], pattern.indices.allSatisfy({ bytes[start + $0] == pattern[$0] }) {
                var reader = JSONReader(bytes)
                reader.position = start + pattern.count
                if (try? reader.expect(UInt8(ascii: ":"), "a colon")) != nil, let value = try? read(&reader) { return value }
            }
            start -= 1
        }
        return nil
    }

    // MARK: Structure

    @inlinable @inline(__always) mutating func skipWhitespace() {
        while position < bytes.count {
            switch bytes[position] {
            case 0x20, 0x0A, 0x0D, 0x09: position += 1
            default: return
            }
        }
    }

    /// The next significant byte, not consumed; nil at the end.
    @inlinable @inline(__always) public mutating func peek() -> UInt8? {
        skipWhitespace()
        return position < bytes.count ? bytes[position] : nil
    }

    @inline(__always) mutating func expect(_ byte: UInt8, _ what: @autoclosure () -> String) throws {
        guard peek() == byte else { throw failure("expected \(what())") }
        position += 1
    }

    /// After the last value: only whitespace may follow.
    public mutating func end() throws {
        if peek() != nil { throw failure("unexpected data after the JSON value") }
    }

    @inline(__always) public mutating func beginObject() throws {
        try expect(UInt8(ascii: "{"), "an object")
        try enter()
        skipWhitespace()
        pendingFirst = true
    }

    /// The next key of the object begun last, with its colon consumed; nil at the closing brace.
    public mutating func nextKey() throws -> String? {
        guard try nextMember(closing: UInt8(ascii: "}"), "the object is not closed", "a comma or a closing brace") else { return nil }
        let key = try readString()
        try expect(UInt8(ascii: ":"), "a colon after the key")
        return key
    }

    /// A key as `nextKeyName` read it: its bytes, when it is ASCII without escapes (every key a
    /// reader looks for), else its text as `nextKey` reads it (repairs counted the same way).
    public enum KeyName {
        case ascii(UnsafeBufferPointer<UInt8>)
        case text(String)

        @inline(__always) public func `is`(_ name: StaticString) -> Bool {
            switch self {
            case .ascii(let bytes): return JSONReader.equal(bytes, name)
            case .text(let text): return text == name.description
            }
        }

        /// Whether this is the key between the quotes of `written`, a key as a server writes
        /// it with its colon (`"name":`).
        func isBetweenQuotes(_ written: StaticString) -> Bool {
            let name = written.utf8Start + 1
            let count = written.utf8CodeUnitCount - 3
            switch self {
            case .ascii(let bytes): return bytes.count == count && (count == 0 || JSONReader.sameBytes(bytes.baseAddress!, name, count: count))
            case .text(let text): return text.utf8.elementsEqual(UnsafeBufferPointer(start: name, count: count))
            }
        }

        /// How many bytes of UTF-8 the key's text takes.
        var byteCount: Int {
            switch self {
            case .ascii(let bytes): return bytes.count
            case .text(let text): return text.utf8.count
            }
        }

        /// The key's text, for messages.
        public var text: String {
            switch self {
            case .ascii(let bytes): return String(decoding: bytes, as: UTF8.self)
            case .text(let text): return text
            }
        }
    }

    /// `nextKey`, without making a String of a plain ASCII key: the members of every record, of
    /// its stamps and zone are looked for by their bytes (a String made and compared per key
    /// cost about a twentieth of reading a page, callgrind).
    public mutating func nextKeyName() throws -> KeyName? {
        guard try nextMember(closing: UInt8(ascii: "}"), "the object is not closed", "a comma or a closing brace") else { return nil }
        return try keyName()
    }

    /// The key that starts here, with its colon consumed.
    @inline(__always) mutating func keyName() throws -> KeyName {
        guard peek() == UInt8(ascii: "\"") else { throw failure("expected a string") }
        let quote = position
        position += 1
        var seen: UInt64 = 0
        skipPlainStringBytes(orInto: &seen)
        let key: KeyName
        if position < bytes.count, bytes[position] == UInt8(ascii: "\""), seen & 0x8080_8080_8080_8080 == 0 {
            key = .ascii(UnsafeBufferPointer(rebasing: bytes[(quote + 1)..<position]))
            position += 1
        } else {
            position = quote
            key = .text(try readString())
        }
        try expect(UInt8(ascii: ":"), "a colon after the key")
        return key
    }

    /// Whether the container begun last has another member: past its comma, or past its
    /// closing bracket (and then out of it).
    @inline(__always) mutating func nextMember(
        closing: UInt8, _ notClosed: @autoclosure () -> String, _ noComma: @autoclosure () -> String
    ) throws -> Bool {
        guard let next = peek() else { throw failure(notClosed()) }
        if next == closing {
            position += 1
            depth -= 1
            pendingFirst = false
            return false
        }
        if !pendingFirst {
            try expect(UInt8(ascii: ","), noComma())
        }
        pendingFirst = false
        return true
    }

    @inline(__always) public mutating func beginArray() throws {
        try expect(UInt8(ascii: "["), "an array")
        try enter()
        pendingFirst = true
    }

    /// Whether another element follows in the array begun last (its comma consumed).
    @inline(__always) public mutating func nextElement() throws -> Bool {
        try nextMember(closing: UInt8(ascii: "]"), "the array is not closed", "a comma or a closing bracket")
    }

    /// A place in the data to come back to, with the nesting it was read at.
    struct Mark {
        fileprivate var position: Int
        fileprivate var depth: Int
        fileprivate var pendingFirst: Bool
    }

    func mark() -> Mark { Mark(position: position, depth: depth, pendingFirst: pendingFirst) }

    /// Starts again at `position` of the same bytes, at no depth, as `init(_:at:)` starts (the
    /// counts of repaired strings and of bytes read into the model carry on): for a reader that
    /// reads one kept value after another (a row's columns), made once rather than for each.
    /// Ending a reader's life releases its two references, nil or not: for each column of a
    /// row, that was about 30 instructions (`Benchmarks/run callgrind`, in process).
    package mutating func restart(at position: Int) {
        self.position = position
        depth = 0
        pendingFirst = false
    }

    /// Reads again from `mark` (or on from it, when it lies ahead).
    mutating func reset(to mark: Mark) {
        position = mark.position
        depth = mark.depth
        pendingFirst = mark.pendingFirst
    }

    /// Whether the container begun last has not had an element yet. Reading a nested value
    /// always ends with this false again, as a value was just read in the outer container.
    var pendingFirst = false

    /// Into an object or a list, no deeper than `maxDepth`. Inlined: called for each of them, its
    /// call had cost more than its work (465 instructions a bench record, callgrind).
    @inline(__always) mutating func enter() throws {
        depth += 1
        if depth > Self.maxDepth { throw failure("the JSON nests deeper than \(Self.maxDepth) levels") }
    }

    // MARK: Scalars

    /// Whether the next value is a string (nothing consumed).
    public mutating func peekIsString() throws -> Bool {
        peek() == UInt8(ascii: "\"")
    }

    /// Whether the next value is a number (nothing consumed).
    public mutating func peekIsNumber() throws -> Bool {
        switch peek() {
        case UInt8(ascii: "-")?, (UInt8(ascii: "0")...UInt8(ascii: "9"))?: return true
        default: return false
        }
    }

    /// True (and consumed) when the next value is `null`.
    public mutating func readNullIfPresent() throws -> Bool {
        guard peek() == UInt8(ascii: "n") else { return false }
        try literal("null")
        return true
    }

    public mutating func readBool() throws -> Bool {
        switch peek() {
        case UInt8(ascii: "t"):
            try literal("true")
            return true
        case UInt8(ascii: "f"):
            try literal("false")
            return false
        default: throw failure("expected true or false")
        }
    }

    mutating func literal(_ word: StaticString) throws {
        let count = word.utf8CodeUnitCount
        guard position + count <= bytes.count else { throw failure("the data ends inside a literal") }
        for i in 0..<count where bytes[position + i] != word.utf8Start[i] {
            throw failure("expected \(word)")
        }
        position += count
    }

    /// The next value if it is a string; any other value is passed, and nil.
    public mutating func readStringOrPass() throws -> String? {
        guard try peekIsString() else {
            try skipValue()
            return nil
        }
        return try readString()
    }

    public mutating func readString() throws -> String {
        guard peek() == UInt8(ascii: "\"") else { throw failure("expected a string") }
        position += 1
        let start = position
        // Most strings have no escapes: one scan, one copy.
        skipPlainStringBytes()
        if position < bytes.count, bytes[position] == UInt8(ascii: "\"") {
            let s = text(UnsafeBufferPointer(rebasing: bytes[start..<position]))
            position += 1
            return s
        }
        var out = [UInt8](UnsafeBufferPointer(rebasing: bytes[start..<position]))
        while position < bytes.count {
            let b = bytes[position]
            position += 1
            switch b {
            case UInt8(ascii: "\""):
                return out.withUnsafeBufferPointer { text($0) }
            case UInt8(ascii: "\\"):
                try readEscape(into: &out)
                let run = position
                skipPlainStringBytes()
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[run..<position]))
            default:
                throw failure("a control character inside a string")
            }
        }
        throw failure("the string is not closed")
    }

    /// The bytes as a String. ASCII needs no validation: `String(decoding:as:)` takes its fast
    /// path, where `String(validating:as:)` instantiated generic metadata on every call (4% of an
    /// HTTP run's CPU in a profile). Other text is validated, and only text that fails is
    /// repaired, and counted.
    @inline(__always) private mutating func text(_ bytes: UnsafeBufferPointer<UInt8>) -> String {
        if Self.isASCII(bytes) { return String(decoding: bytes, as: UTF8.self) }
        if let valid = String(validating: bytes, as: UTF8.self) { return valid }
        repairedStrings += 1
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Whether every byte is below 0x80; one pass the compiler vectorises.
    @inline(__always) static func isASCII(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        var seen: UInt8 = 0
        for byte in bytes { seen |= byte }
        return seen < 0x80
    }

    mutating func readEscape(into out: inout [UInt8]) throws {
        let scalar = try readEscapedScalar()
        var utf8 = Self.utf8(of: scalar)
        withUnsafeBytes(of: &utf8.bytes) { out.append(contentsOf: $0.prefix(utf8.count)) }
    }

    /// The character an escape stands for, the reader past it (and past the low half of a
    /// surrogate pair); a lone half is replaced by U+FFFD, as Foundation does, and counted.
    @usableFromInline mutating func readEscapedScalar() throws -> Unicode.Scalar {
        guard position < bytes.count else { throw failure("the data ends inside an escape") }
        let e = bytes[position]
        position += 1
        switch e {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): return Unicode.Scalar(e)
        case UInt8(ascii: "b"): return "\u{08}"
        case UInt8(ascii: "f"): return "\u{0C}"
        case UInt8(ascii: "n"): return "\n"
        case UInt8(ascii: "r"): return "\r"
        case UInt8(ascii: "t"): return "\t"
        case UInt8(ascii: "u"):
            var scalar = try readHex4()
            if (0xD800..<0xDC00).contains(scalar) {
                // A high surrogate joins the low one of a following \u escape; alone it is
                // replaced, as Foundation does.
                if position + 6 <= bytes.count, bytes[position] == UInt8(ascii: "\\"), bytes[position + 1] == UInt8(ascii: "u") {
                    let saved = position
                    position += 2
                    let low = try readHex4()
                    if (0xDC00..<0xE000).contains(low) {
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else {
                        position = saved
                        scalar = 0xFFFD
                        repairedStrings += 1
                    }
                } else {
                    scalar = 0xFFFD
                    repairedStrings += 1
                }
            } else if (0xDC00..<0xE000).contains(scalar) {
                scalar = 0xFFFD
                repairedStrings += 1
            }
            // Below 0x110000 and not a surrogate, as made above.
            return Unicode.Scalar(scalar) ?? "\u{FFFD}"
        default:
            throw failure("an unknown escape in a string")
        }
    }

    /// A character's UTF-8, in the first `count` bytes of `bytes` as they lie in memory (no
    /// array made).
    @usableFromInline static func utf8(of scalar: Unicode.Scalar) -> (bytes: UInt32, count: Int) {
        var bytes: UInt32 = 0
        var count = 0
        for unit in UTF8.encode(scalar)! {
            bytes |= UInt32(unit) << (8 * count)
            count += 1
        }
        return (bytes.littleEndian, count)
    }

    mutating func readHex4() throws -> UInt32 {
        guard position + 4 <= bytes.count else { throw failure("the data ends inside a \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let b = bytes[position]
            position += 1
            let digit: UInt8
            switch b {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = b - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = b - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = b - UInt8(ascii: "A") + 10
            default: throw failure("a bad digit in a \\u escape")
            }
            value = value << 4 | UInt32(digit)
        }
        return value
    }

    /// A number: exact when it is an integer that fits Int64 (`-0` included, as `negativeZero`),
    /// a Double otherwise.
    public enum Number {
        case int(Int64)
        case double(Double)
        case negativeZero
    }

    public mutating func readNumber() throws -> Number {
        let scanned = try scanNumber()
        if scanned.isInteger && !scanned.overflow {
            if scanned.negative {
                if scanned.magnitude == 0 { return .negativeZero }
                if scanned.magnitude <= UInt64(Int64.max) + 1 {
                    return .int(scanned.magnitude == UInt64(Int64.max) + 1 ? Int64.min : -Int64(scanned.magnitude))
                }
            } else if scanned.magnitude <= UInt64(Int64.max) {
                return .int(Int64(scanned.magnitude))
            }
        }
        return .double(parseDouble(scanned.range))
    }

    /// A number's extent and, when it has no fraction or exponent, its digits' value.
    struct ScannedNumber {
        var range: Range<Int>
        var negative: Bool
        var magnitude: UInt64
        var overflow: Bool
        var isInteger: Bool
    }

    /// Reads past a number, checking its syntax (RFC 8259, section 6).
    mutating func scanNumber() throws -> ScannedNumber {
        _ = peek()
        let start = position
        var negative = false
        if position < bytes.count, bytes[position] == UInt8(ascii: "-") {
            negative = true
            position += 1
        }
        let digitsStart = position
        var magnitude: UInt64 = 0
        var overflow = false
        // Eight digits at a time while eight bytes are left (a timestamp's 13 in two steps, not
        // 13), then one at a time. Overflow is noted the same either way: the value so far, times
        // ten to the digits taken, plus theirs, does not fit.
        if let base = bytes.baseAddress {
            while position + 8 <= bytes.count {
                let (count, value) = Self.leadingDigits(UnsafeRawPointer(base + position).loadUnaligned(as: UInt64.self))
                guard count > 0 else { break }
                let (m1, o1) = magnitude.multipliedReportingOverflow(by: Self.tenToThe(count))
                let (m2, o2) = m1.addingReportingOverflow(value)
                overflow = overflow || o1 || o2
                magnitude = m2
                position += count
                if count < 8 { break }
            }
        }
        while position < bytes.count, case let b = bytes[position], b >= UInt8(ascii: "0"), b <= UInt8(ascii: "9") {
            let (m1, o1) = magnitude.multipliedReportingOverflow(by: 10)
            let (m2, o2) = m1.addingReportingOverflow(UInt64(b - UInt8(ascii: "0")))
            overflow = overflow || o1 || o2
            magnitude = m2
            position += 1
        }
        let digitCount = position - digitsStart
        guard digitCount > 0 else { throw failure("expected a value") }
        if digitCount > 1 && bytes[digitsStart] == UInt8(ascii: "0") { throw failure("a number with a leading zero") }
        var isInteger = true
        if position < bytes.count, bytes[position] == UInt8(ascii: ".") {
            isInteger = false
            position += 1
            let fractionStart = position
            skipDigits()
            guard position > fractionStart else { throw failure("a number without digits after its point") }
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: "e") || bytes[position] == UInt8(ascii: "E") {
            isInteger = false
            position += 1
            if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") { position += 1 }
            let exponentStart = position
            while position < bytes.count, bytes[position] >= UInt8(ascii: "0"), bytes[position] <= UInt8(ascii: "9") { position += 1 }
            guard position > exponentStart else { throw failure("a number without digits in its exponent") }
        }
        return ScannedNumber(range: start..<position, negative: negative, magnitude: magnitude, overflow: overflow, isInteger: isInteger)
    }

    /// Past a run of digits: eight at a time while eight bytes are left, then one at a time.
    @inline(__always) mutating func skipDigits() {
        if let base = bytes.baseAddress {
            while position + 8 <= bytes.count {
                let count = Self.leadingDigits(UnsafeRawPointer(base + position).loadUnaligned(as: UInt64.self)).count
                position += count
                if count < 8 { return }
            }
        }
        while position < bytes.count, bytes[position] &- UInt8(ascii: "0") < 10 { position += 1 }
    }

    /// How many of a little-endian word's bytes, from its first, are ASCII digits, and the number
    /// they spell. A byte is a digit when its high nibble is 3 and is still 3 with 6 added (0x30
    /// to 0x39); a carry out of a byte past 0xF9 reaches only the bytes after it, which come after
    /// a byte that is not a digit. The digits are moved to the top of the word, so that the bytes
    /// below them are leading zeros, and joined two, four and eight at a time by three multiplies
    /// (the method of simdjson's `parse_eight_digits_unrolled`, Lemire and Langdale).
    @inline(__always) static func leadingDigits(_ word: UInt64) -> (count: Int, value: UInt64) {
        let highNibbles: UInt64 = 0xF0F0_F0F0_F0F0_F0F0
        let threes: UInt64 = 0x3030_3030_3030_3030
        let notDigits = ((word & highNibbles) ^ threes) | (((word &+ 0x0606_0606_0606_0606) & highNibbles) ^ threes)
        let count = notDigits == 0 ? 8 : notDigits.trailingZeroBitCount &>> 3
        guard count > 0 else { return (0, 0) }
        var v = (word &<< UInt64((8 &- count) &* 8)) & 0x0F0F_0F0F_0F0F_0F0F
        v = (v &* 2561) &>> 8
        v = ((v & 0x00FF_00FF_00FF_00FF) &* 6_553_601) &>> 16
        v = ((v & 0x0000_FFFF_0000_FFFF) &* 42_949_672_960_001) &>> 32
        return (count, v)
    }

    /// 10 to the power of 1 to 8.
    @inline(__always) static func tenToThe(_ count: Int) -> UInt64 {
        switch count {
        case 1: 10
        case 2: 100
        case 3: 1000
        case 4: 10000
        case 5: 100_000
        case 6: 1_000_000
        case 7: 10_000_000
        default: 100_000_000
        }
    }

    private func parseDouble(_ range: Range<Int>) -> Double {
        if let exact = Self.exactDouble(UnsafeBufferPointer(rebasing: bytes[range])) { return exact }
        // strtod needs a terminated string; numbers are short.
        return withUnsafeTemporaryAllocation(of: CChar.self, capacity: range.count + 1) { buffer in
            for (i, b) in bytes[range].enumerated() { buffer[i] = CChar(bitPattern: b) }
            buffer[range.count] = 0
            return strtod(buffer.baseAddress!, nil)
        }
    }

    /// The Double nearest a number (checked JSON) of at most 15 digits from its first that is not
    /// 0, whose power of ten, once its point is taken away, is within ±22; nil for any other,
    /// which `strtod` reads. The digits as an integer and that power of ten are both exact in a
    /// Double, so one multiplication or division rounds once, to the nearest Double, as `strtod`
    /// does (Clinger's fast path, "How to Read Floating Point Numbers Accurately", 1990).
    /// `strtod` was 1.7% of the micro-benchmark's instructions (`Benchmarks/`), for numbers such
    /// as 4.5.
    static func exactDouble(_ text: UnsafeBufferPointer<UInt8>) -> Double? {
        var i = 0
        let negative = !text.isEmpty && text[0] == UInt8(ascii: "-")
        if negative { i = 1 }
        var digits: UInt64 = 0
        var count = 0
        var power = 0
        var inFraction = false
        while i < text.count {
            let b = text[i]
            if b &- UInt8(ascii: "0") < 10 {
                // Zeros before the first other digit count for nothing but their place.
                if digits != 0 || b != UInt8(ascii: "0") {
                    count += 1
                    guard count <= 15 else { return nil }
                    digits = digits * 10 + UInt64(b &- UInt8(ascii: "0"))
                }
                if inFraction { power -= 1 }
            } else if b == UInt8(ascii: ".") {
                inFraction = true
            } else {
                break  // the exponent's e or E
            }
            i += 1
        }
        if i < text.count {
            i += 1
            var exponentNegative = false
            if i < text.count, text[i] == UInt8(ascii: "-") || text[i] == UInt8(ascii: "+") {
                exponentNegative = text[i] == UInt8(ascii: "-")
                i += 1
            }
            var exponent = 0
            while i < text.count {
                exponent = exponent * 10 + Int(text[i] &- UInt8(ascii: "0"))
                guard exponent <= 1_000 else { return nil }
                i += 1
            }
            power += exponentNegative ? -exponent : exponent
        }
        if count == 0 { return negative ? -0.0 : 0.0 }
        guard (-22...22).contains(power) else { return nil }
        let magnitude = power < 0 ? Double(digits) / Self.powersOfTen[-power] : Double(digits) * Self.powersOfTen[power]
        return negative ? -magnitude : magnitude
    }

    /// 1e0 through 1e22: every one exact in a Double.
    private static let powersOfTen: [Double] = (0...22).map { power in (0..<power).reduce(1.0) { value, _ in value * 10 } }

    // MARK: Any value

    /// Any value, as a `JSONValue`.
    public mutating func readValue() throws -> JSONValue {
        switch peek() {
        case UInt8(ascii: "{"):
            try beginObject()
            var members: [String: JSONValue] = [:]
            while let key = try nextKey() { members[key] = try readValue() }
            return .object(members)
        case UInt8(ascii: "["):
            try beginArray()
            var items: [JSONValue] = []
            while try nextElement() { items.append(try readValue()) }
            return .array(items)
        case UInt8(ascii: "\""):
            return .string(try readString())
        case UInt8(ascii: "t"), UInt8(ascii: "f"):
            return .bool(try readBool())
        case UInt8(ascii: "n"):
            try literal("null")
            return .null
        case nil:
            throw failure("the data ends where a value was expected")
        default:
            switch try readNumber() {
            case .int(let i): return .int(i)
            case .double(let d): return .double(d)
            case .negativeZero: return .int(0)
            }
        }
    }

    /// Reads past any value, checking its syntax as the readers do, without building it.
    public mutating func skipValue() throws {
        switch peek() {
        case UInt8(ascii: "{"):
            try beginObject()
            while try nextKeySkipped() { try skipValue() }
        case UInt8(ascii: "["):
            try beginArray()
            while try nextElement() { try skipValue() }
        case UInt8(ascii: "\""):
            try skipString()
        case UInt8(ascii: "t"), UInt8(ascii: "f"):
            _ = try readBool()
        case UInt8(ascii: "n"):
            try literal("null")
        case nil:
            throw failure("the data ends where a value was expected")
        default:
            _ = try scanNumber()
        }
    }

    /// Reads past a value trusting its syntax: in a list or an object only the brackets outside
    /// strings are counted, nothing else is checked. For a value that is read properly
    /// afterwards (or not needed), where checking it twice would cost twice.
    public mutating func skipValueLoosely() throws {
        guard let first = peek(), first == UInt8(ascii: "{") || first == UInt8(ascii: "["), let base = bytes.baseAddress else {
            try skipValue()
            return
        }
        var nesting = 0
        while position < bytes.count {
            let b = base[position]
            position += 1
            switch b {
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                nesting += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                nesting -= 1
                if nesting == 0 { return }
            case UInt8(ascii: "\""):
                while true {
                    skipPlainStringBytes()
                    guard position < bytes.count else { throw failure("the string is not closed") }
                    let special = base[position]
                    position += 1
                    if special == UInt8(ascii: "\"") { break }
                    if special == UInt8(ascii: "\\") { position += 1 }  // the escaped byte, whatever it is
                }
            default:
                break
            }
        }
        throw failure("the data ends inside a value")
    }

    /// `nextKey` without making the key a String: whether a key (and its colon) was read.
    private mutating func nextKeySkipped() throws -> Bool {
        guard try nextMember(closing: UInt8(ascii: "}"), "the object is not closed", "a comma or a closing brace") else { return false }
        try skipString()
        try expect(UInt8(ascii: ":"), "a colon after the key")
        return true
    }

    /// Moves past the bytes of a string that need no attention, up to its closing quote, a
    /// backslash, a control character or the end of the data. Eight bytes are tested at a time,
    /// as one word, then the last few one by one.
    @inlinable @inline(__always) mutating func skipPlainStringBytes() {
        guard let base = bytes.baseAddress else { return }
        while position + 8 <= bytes.count {
            let word = UInt64(littleEndian: UnsafeRawPointer(base + position).loadUnaligned(as: UInt64.self))
            let special = Self.specialBytes(word)
            if special != 0 {
                // The lowest flag is exact (see `specialBytes`): the byte it marks is the first.
                position += special.trailingZeroBitCount >> 3
                return
            }
            position += 8
        }
        while position < bytes.count {
            let b = base[position]
            if b == UInt8(ascii: "\"") || b == UInt8(ascii: "\\") || b < 0x20 { return }
            position += 1
        }
    }

    /// `skipPlainStringBytes`, ORing every byte passed into `seen`, so that text with no byte
    /// past 0x7F (`seen & 0x8080…` zero) needs no UTF-8 check.
    @inline(__always) mutating func skipPlainStringBytes(orInto seen: inout UInt64) {
        guard let base = bytes.baseAddress else { return }
        while position + 8 <= bytes.count {
            let word = UInt64(littleEndian: UnsafeRawPointer(base + position).loadUnaligned(as: UInt64.self))
            let special = Self.specialBytes(word)
            if special != 0 {
                let passed = special.trailingZeroBitCount >> 3
                // The bytes before the first special one: none (a mask of 0) to seven.
                seen |= word & ((1 &<< (UInt64(passed) &<< 3)) &- 1)
                position += passed
                return
            }
            seen |= word
            position += 8
        }
        while position < bytes.count {
            let b = base[position]
            if b == UInt8(ascii: "\"") || b == UInt8(ascii: "\\") || b < 0x20 { return }
            seen |= UInt64(b)
            position += 1
        }
    }

    /// The high bit of each byte of a little-endian word that may be a `"`, a `\` or below 0x20,
    /// of which the lowest is exact: it marks the first such byte, and a word without one has
    /// none. The zero-byte test of "Bit Twiddling Hacks" (Sean Eron Anderson), on the word XORed
    /// with each byte looked for, and its less-than form for the control characters: a borrow
    /// runs only upwards, from a byte that matched, so only bytes above the first match can be
    /// marked wrongly. Taking the first mark's place at once, instead of looking again byte by
    /// byte, saved a tenth of the instructions of reading a page (callgrind).
    @inlinable @inline(__always) static func specialBytes(_ word: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        let quote = word ^ (ones &* 0x22)
        let backslash = word ^ (ones &* 0x5C)
        let hasQuote = (quote &- ones) & ~quote & highs
        let hasBackslash = (backslash &- ones) & ~backslash & highs
        let hasControl = (word &- ones &* 0x20) & ~word & highs
        return hasQuote | hasBackslash | hasControl
    }

    /// Reads past a string, with the checks of `readString`.
    public mutating func skipString() throws {
        guard peek() == UInt8(ascii: "\"") else { throw failure("expected a string") }
        position += 1
        var scratch: [UInt8] = []
        while true {
            skipPlainStringBytes()
            guard position < bytes.count else { throw failure("the string is not closed") }
            let b = bytes[position]
            position += 1
            switch b {
            case UInt8(ascii: "\""):
                return
            case UInt8(ascii: "\\"):
                // Checked as when read; escapes are rare, so the scratch bytes cost nothing.
                try readEscape(into: &scratch)
                scratch.removeAll(keepingCapacity: true)
            default:
                throw failure("a control character inside a string")
            }
        }
    }
}
