#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// Reading a record's fields as the JSON they came in: the check that lets them stay so, and the
// readers a destination uses on them without making a String of each name and value.

extension JSONReader {
    /// The extent of a record's `fields` object, when its JSON can be kept as it came and read
    /// later without surprises; nil, with the reader where it was, when it must be read now.
    ///
    /// It can be kept when reading it now (`RecordEntry.readFields`) would find nothing wrong:
    /// every field is an object whose `type`, if any, is a string or null; every string and key
    /// is valid UTF-8 without an escaped NUL or half a surrogate pair (which would be repaired,
    /// and the record rejected); no key has an escape (so that names compare by their bytes);
    /// and every number is one PostgreSQL's jsonb takes as it is, short and within its range.
    /// Otherwise the fields are read now, which says what is wrong exactly as before.
    ///
    /// What the check finds of each field (where its name, object, value and type are, and
    /// whether an object value would come out of the model as it came) comes back with it, so
    /// that a destination need not look for them again.
    ///
    /// The fields found are kept in the page's index (`JSONBytes.keep`): `page` must be the
    /// reader's own, whose bytes it reads.
    mutating func plainFieldsObject(keepingIn page: JSONBytes) -> (range: Range<Int>, fields: UnsafeBufferPointer<RawField>)? {
        let start = mark()
        // Offsets are kept as Int32: a response is at most 1 GiB (`maxResponseBytes`).
        guard bytes.count <= Int(Int32.max), peek() == UInt8(ascii: "{") else { return nil }
        let from = position
        page.beginKeeping()
        guard (try? scanPlainFields(keepingIn: page)) == true else {
            page.abandonKeeping()
            reset(to: start)
            return nil
        }
        return (from..<position, page.endKeeping())
    }

    private mutating func scanPlainFields(keepingIn page: JSONBytes) throws -> Bool {
        try beginObject()
        while try nextMember(closing: UInt8(ascii: "}"), "the object is not closed", "a comma or a closing brace") {
            // A field's name in ASCII: names are then the same compared as bytes and as Swift
            // Strings, which take a precomposed é and e with a combining accent for one name.
            guard let (name, isASCII) = try scanPlainKey(), isASCII else { return false }
            try expect(UInt8(ascii: ":"), "a colon after the key")
            guard peek() == UInt8(ascii: "{") else { return false }
            var field = RawField(name: Int32(offset(of: name))..<Int32(offset(of: name) + name.count), objectStart: Int32(position))
            try beginObject()
            // `"type":"…","value":…` as CloudKit writes a field's object (or the other way round,
            // as Apple's reference shows it) is read with a compare of a word for each key;
            // whatever follows, and any other shape, member by member. (The micro-benchmark:
            // 42,231 → 41,362 instructions a record.)
            if startsWithWord(Self.typeKeyAndQuote) {
                position += 7
                pendingFirst = false
                guard try scanFieldType(into: &field) else { return false }
                if startsWithWord(Self.commaValueKey), position + 8 < bytes.count, bytes[position + 8] == UInt8(ascii: ":") {
                    position += 9
                    guard try scanFieldValue(into: &field) else { return false }
                }
            } else if startsWithWord(Self.valueKey) {
                position += 8
                pendingFirst = false
                guard try scanFieldValue(into: &field) else { return false }
                if startsWithWord(Self.commaTypeKey) {
                    position += 8
                    guard try scanFieldType(into: &field) else { return false }
                }
            }
            while try nextMember(closing: UInt8(ascii: "}"), "the object is not closed", "a comma or a closing brace") {
                switch try fieldMember() {
                case .unreadable: return false
                case .type: guard try scanFieldType(into: &field) else { return false }
                case .value: guard try scanFieldValue(into: &field) else { return false }
                case .other: guard try scanPlainValue() else { return false }
                }
            }
            field.objectEnd = Int32(position)
            page.keep(field)
        }
        return true
    }

    /// A field's `type`, after its key: a string or null; whether it can be kept.
    @inline(__always) private mutating func scanFieldType(into field: inout RawField) throws -> Bool {
        switch peek() {
        case UInt8(ascii: "n"):
            try literal("null")
            field.tag = nil
            return true
        case UInt8(ascii: "\""):
            let tagStart = position + 1
            guard try scanPlainString() else { return false }
            // Its bytes, escapes and all: a tag written with an escape holds a backslash, which
            // no type a destination knows by its bytes has.
            field.tag = Int32(tagStart)..<Int32(position - 1)
            return true
        default:
            return false
        }
    }

    /// A field's `value`, after its key; whether it can be kept.
    private mutating func scanFieldValue(into field: inout RawField) throws -> Bool {
        field.value = Int32(valueStart())
        // Whether an object's JSON would come out of the model as it came is noted here, where
        // each of its keys and numbers passes anyway.
        if peek() == UInt8(ascii: "\"") {
            // A string's end is noted, and whether it has an escape: a destination then copies
            // its bytes, or undoes its escapes, without looking for its end again.
            field.objectKeptUpTo = -1
            var escaped = false
            guard try scanPlainString(escaped: &escaped) else { return false }
            field.stringEnd = Int32(position - 1)
            field.stringEscaped = escaped
            return true
        }
        field.stringEnd = -1
        guard peek() == UInt8(ascii: "{") else {
            field.objectKeptUpTo = -1
            return try scanPlainValue()
        }
        var meaning = MeaningKept()
        guard try scanPlainValue(noting: &meaning) else { return false }
        field.objectKeptUpTo = meaning.kept ? Int32(position) : -1
        return true
    }

    /// Whether the next eight bytes are `word`'s (little-endian).
    @inline(__always) private func startsWithWord(_ word: UInt64) -> Bool {
        guard position + 8 <= bytes.count, let base = bytes.baseAddress else { return false }
        return UInt64(littleEndian: UnsafeRawPointer(base + position).loadUnaligned(as: UInt64.self)) == word
    }

    /// What a member of a field's object is, by its key.
    private enum FieldMember {
        case type, value, other
        /// A key that cannot be kept (see `scanPlainKey`).
        case unreadable
    }

    /// The key of a field object's member, with its colon consumed. `"value":` and `"type":`,
    /// as CloudKit writes them, are known by a word's compare; any other way of writing a key
    /// is read by `scanPlainKey`. (The micro-benchmark, `Benchmarks/`, takes 2.5% fewer
    /// instructions so.)
    private mutating func fieldMember() throws -> FieldMember {
        if position + 8 <= bytes.count, let base = bytes.baseAddress {
            let word = UInt64(littleEndian: UnsafeRawPointer(base + position).loadUnaligned(as: UInt64.self))
            if word == Self.valueKey {
                position += 8
                return .value
            }
            if word & 0x00FF_FFFF_FFFF_FFFF == Self.typeKey {
                position += 7
                return .type
            }
        }
        guard let (key, _) = try scanPlainKey() else { return .unreadable }
        try expect(UInt8(ascii: ":"), "a colon after the key")
        return Self.equal(key, "type") ? .type : Self.equal(key, "value") ? .value : .other
    }

    /// `"value":` and `"type":` as little-endian words (the second in its low seven bytes), as
    /// literals: a computed constant is reached through `swift_once` at every use.
    static let valueKey: UInt64 = 0x3A22_6575_6C61_7622
    static let typeKey: UInt64 = 0x003A_2265_7079_7422
    /// `"type":"`, `,"type":` and `,"value"` as little-endian words.
    static let typeKeyAndQuote: UInt64 = 0x223A_2265_7079_7422
    static let commaTypeKey: UInt64 = 0x3A22_6570_7974_222C
    static let commaValueKey: UInt64 = 0x2265_756C_6176_222C

    private func offset(of part: UnsafeBufferPointer<UInt8>) -> Int { bytes.baseAddress!.distance(to: part.baseAddress!) }

    private mutating func scanPlainValue() throws -> Bool {
        var nothing = NothingNoted()
        return try scanPlainValue(noting: &nothing)
    }

    /// Past a value, telling `note` of each key and number it passes; whether it can be kept as
    /// it came. (Generic so that the check that notes nothing is compiled without the calls.)
    private mutating func scanPlainValue<Note: ValueNote>(noting note: inout Note) throws -> Bool {
        switch peek() {
        case UInt8(ascii: "{"):
            try beginObject()
            while try nextMember(closing: UInt8(ascii: "}"), "the object is not closed", "a comma or a closing brace") {
                guard let (_, isASCII) = try scanPlainKey() else { return false }
                note.key(isASCII: isASCII)
                try expect(UInt8(ascii: ":"), "a colon after the key")
                guard try scanPlainValue(noting: &note) else { return false }
            }
            return true
        case UInt8(ascii: "["):
            try beginArray()
            while try nextElement() {
                guard try scanPlainValue(noting: &note) else { return false }
            }
            return true
        case UInt8(ascii: "\""):
            return try scanPlainString()
        case UInt8(ascii: "t"), UInt8(ascii: "f"):
            _ = try readBool()
            return true
        case UInt8(ascii: "n"):
            try literal("null")
            return true
        case nil:
            throw failure("the data ends where a value was expected")
        default:
            let start = position
            guard try scanPlainNumber() else { return false }
            note.number(UnsafeBufferPointer(rebasing: bytes[start..<position]))
            return true
        }
    }

    /// A key without escapes, in valid UTF-8: its bytes, and whether they are ASCII (known from
    /// the scan, where looking at the name again cost each field a loop); nil for any other key.
    @inline(__always) private mutating func scanPlainKey() throws -> (UnsafeBufferPointer<UInt8>, isASCII: Bool)? {
        guard peek() == UInt8(ascii: "\"") else { throw failure("expected a string") }
        position += 1
        let start = position
        var seen: UInt64 = 0
        skipPlainStringBytes(orInto: &seen)
        guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else { return nil }
        let key = UnsafeBufferPointer(rebasing: bytes[start..<position])
        position += 1
        if seen & Self.highBits == 0 { return (key, true) }
        return UTF8Check.isValid(key) ? (key, false) : nil
    }

    static let highBits: UInt64 = 0x8080_8080_8080_8080

    /// Past a string; whether it is valid text that needs no repair and holds no NUL.
    private mutating func scanPlainString() throws -> Bool {
        var escaped = false
        return try scanPlainString(escaped: &escaped)
    }

    /// `scanPlainString`, saying whether the string has an escape.
    @inline(__always) private mutating func scanPlainString(escaped: inout Bool) throws -> Bool {
        position += 1
        while true {
            let run = position
            var seen: UInt64 = 0
            skipPlainStringBytes(orInto: &seen)
            if seen & Self.highBits != 0, !UTF8Check.isValid(UnsafeBufferPointer(rebasing: bytes[run..<position])) { return false }
            guard position < bytes.count else { throw failure("the string is not closed") }
            let b = bytes[position]
            position += 1
            switch b {
            case UInt8(ascii: "\""):
                return true
            case UInt8(ascii: "\\"):
                guard position < bytes.count else { throw failure("the data ends inside an escape") }
                escaped = true
                let e = bytes[position]
                position += 1
                switch e {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"), UInt8(ascii: "n"),
                    UInt8(ascii: "r"), UInt8(ascii: "t"):
                    continue
                case UInt8(ascii: "u"):
                    let scalar = try readHex4()
                    if scalar == 0 || (0xDC00..<0xE000).contains(scalar) { return false }
                    if (0xD800..<0xDC00).contains(scalar) {
                        guard position + 6 <= bytes.count, bytes[position] == UInt8(ascii: "\\"), bytes[position + 1] == UInt8(ascii: "u")
                        else { return false }
                        position += 2
                        guard (0xDC00..<0xE000).contains(try readHex4()) else { return false }
                    }
                default:
                    throw failure("an unknown escape in a string")
                }
            default:
                throw failure("a control character inside a string")
            }
        }
    }

    /// Past a number, checking its syntax as `scanNumber` does without working out its value;
    /// whether PostgreSQL's jsonb takes it as written without making much of it. Its numeric
    /// type refuses exponents past about ±16,383 and 131,072, and `1e131071` would be stored as
    /// 131,072 digits: longer numbers and larger exponents are read as doubles instead (the
    /// model's way), as they were before fields were kept as JSON.
    private mutating func scanPlainNumber() throws -> Bool {
        let start = position
        if position < bytes.count, bytes[position] == UInt8(ascii: "-") { position += 1 }
        let digits = position
        skipDigits()
        guard position > digits else { throw failure("expected a value") }
        if position - digits > 1 && bytes[digits] == UInt8(ascii: "0") { throw failure("a number with a leading zero") }
        if position < bytes.count, bytes[position] == UInt8(ascii: ".") {
            position += 1
            let fraction = position
            skipDigits()
            guard position > fraction else { throw failure("a number without digits after its point") }
        }
        var exponent = 0
        if position < bytes.count, bytes[position] | 0x20 == UInt8(ascii: "e") {
            position += 1
            if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") { position += 1 }
            let digits = position
            while position < bytes.count, case let d = bytes[position] &- UInt8(ascii: "0"), d < 10 {
                exponent = min(exponent * 10 + Int(d), 100_000)
                position += 1
            }
            guard position > digits else { throw failure("a number without digits in its exponent") }
        }
        return position - start <= 64 && exponent <= 330
    }

    /// Whether the bytes spell `word`: by `sameBytes` for the 4 to 16 bytes of every key and type
    /// tag looked for, by `memcmp` otherwise.
    @inlinable @inline(__always) public static func equal(_ bytes: UnsafeBufferPointer<UInt8>, _ word: StaticString) -> Bool {
        let count = word.utf8CodeUnitCount
        guard bytes.count == count, count > 0 else { return bytes.count == count }
        return count >= 4 && count <= 16 ? sameBytes(bytes.baseAddress!, word.utf8Start, count: count) : memcmp(bytes.baseAddress!, word.utf8Start, count) == 0
    }

    /// Whether the `count` bytes at `a` and at `b` are the same: eight bytes at a time, the last
    /// eight (or four) overlapping the ones before. Keys, type tags and field names are a few
    /// bytes, and a call of `memcmp` cost more than the bytes it compared (2.9% of a run over
    /// HTTP, perf).
    @inlinable @inline(__always) public static func sameBytes(_ a: UnsafeRawPointer, _ b: UnsafeRawPointer, count: Int) -> Bool {
        guard count >= 4 else { return (0..<count).allSatisfy { a.load(fromByteOffset: $0, as: UInt8.self) == b.load(fromByteOffset: $0, as: UInt8.self) } }
        guard count >= 8 else {
            return a.loadUnaligned(as: UInt32.self) == b.loadUnaligned(as: UInt32.self)
                && a.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self) == b.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self)
        }
        var at = 0
        while at + 8 < count {
            guard a.loadUnaligned(fromByteOffset: at, as: UInt64.self) == b.loadUnaligned(fromByteOffset: at, as: UInt64.self) else { return false }
            at += 8
        }
        return a.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self) == b.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self)
    }

    // MARK: Reading kept fields

    /// A reader over kept JSON, at `position`.
    public init(_ bytes: UnsafeBufferPointer<UInt8>, at position: Int) {
        self.init(bytes)
        self.position = position
    }

    /// The next key of the object begun last, as its bytes between the quotes, with its colon
    /// consumed; nil at the closing brace. For JSON that `plainFieldsObject` checked: a key
    /// with an escape is refused.
    public mutating func nextKeyBytes() throws -> UnsafeBufferPointer<UInt8>? {
        guard try nextMember(closing: UInt8(ascii: "}"), "the object is not closed", "a comma or a closing brace") else { return nil }
        guard peek() == UInt8(ascii: "\"") else { throw failure("expected a string") }
        position += 1
        let start = position
        skipPlainStringBytes()
        guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else { throw failure("a key with an escape") }
        let key = UnsafeBufferPointer(rebasing: bytes[start..<position])
        position += 1
        try expect(UInt8(ascii: ":"), "a colon after the key")
        return key
    }

    /// Moves past `text` when the bytes here are exactly it (no space skipped); false, with the
    /// reader where it was, otherwise. For JSON in a form known to be common, read faster than
    /// member by member, where any other form is read the general way.
    @inlinable public mutating func skip(ifNext text: StaticString) -> Bool {
        let count = text.utf8CodeUnitCount
        guard position + count <= bytes.count, let base = bytes.baseAddress, Self.sameBytes(base + position, text.utf8Start, count: count)
        else { return false }
        position += count
        return true
    }

    /// The `recordName` of a REFERENCE's value written as CloudKit writes one, its members in
    /// its order without spaces: `{"recordName":"…","zoneID":{"zoneName":"…","ownerRecordName":
    /// "…","zoneType":"…"},"action":"…"}`, the zone, its owner and type, and the action each
    /// there or not: the name's bytes between its quotes, and whether it has an escape. Its
    /// members are known by a compare each, where reading it member by member looks at every key
    /// several times. Nil, with the reader where it was, for any other form, which may still be
    /// a reference. For JSON that `plainFieldsObject` checked.
    public mutating func cloudKitsReferenceName() throws -> StringToken? {
        let start = position
        func string(after key: StaticString) throws -> Bool {
            guard skip(ifNext: key) else { return true }
            guard peek() == UInt8(ascii: "\"") else { return false }
            try skipString()
            return true
        }
        if skip(ifNext: #"{"recordName":"#), peek() == UInt8(ascii: "\"") {
            let name = try readStringToken()
            var zone = true
            if skip(ifNext: #","zoneID":{"zoneName":"#) {
                zone = peek() == UInt8(ascii: "\"")
                if zone {
                    try skipString()
                    zone = try string(after: #","ownerRecordName":"#) && string(after: #","zoneType":"#) && skip(ifNext: "}")
                }
            }
            if zone, try string(after: #","action":"#), skip(ifNext: "}") { return name }
        }
        position = start
        return nil
    }

    /// A string's bytes between its quotes, as written (escapes not undone), and whether it has
    /// any escape: its text is its bytes without one, `unescapeChecked`'s with one.
    public typealias StringToken = (bytes: UnsafeBufferPointer<UInt8>, escaped: Bool)

    /// The string that starts here, as a `StringToken`.
    public mutating func readStringToken() throws -> StringToken {
        guard peek() == UInt8(ascii: "\"") else { throw failure("expected a string") }
        let start = position + 1
        var escaped = false
        position += 1
        while true {
            skipPlainStringBytes()
            guard position < bytes.count else { throw failure("the string is not closed") }
            let b = bytes[position]
            position += 1
            if b == UInt8(ascii: "\"") { break }
            guard b == UInt8(ascii: "\\") else { throw failure("a control character inside a string") }
            escaped = true
            position += 1
        }
        return (UnsafeBufferPointer(rebasing: bytes[start..<(position - 1)]), escaped)
    }

    /// The text of a string that `plainFieldsObject` checked, given as its bytes between its
    /// quotes, with its escapes undone, written to `out`, which has room for `raw.count` bytes
    /// (no escape stands for more bytes than its own); the count written. The check found every
    /// escape whole, none a NUL and every half of a surrogate pair beside the other, so nothing
    /// here fails or needs repair (other bytes give other text, never a write past the room).
    /// One pass, the runs between escapes copied eight bytes at a time, where a reader before it
    /// handed each run and each escape to a closure: 3.3% fewer instructions a record of the
    /// bench's (`Benchmarks/run`, straight path, 47,876-47,920 → 46,297-46,300, three runs each).
    public static func unescapeChecked(_ raw: UnsafeBufferPointer<UInt8>, into out: UnsafeMutablePointer<UInt8>) -> Int {
        guard let from = raw.baseAddress else { return 0 }
        let n = raw.count
        var i = 0
        var o = 0
        // `o <= i` throughout: a word stored at `o` ends within the room when its load at `i` did.
        while i < n {
            while i + 8 <= n {
                let word = UnsafeRawPointer(from + i).loadUnaligned(as: UInt64.self)
                UnsafeMutableRawPointer(out + o).storeBytes(of: word, as: UInt64.self)
                let backslash = Self.backslashBytes(UInt64(littleEndian: word))
                if backslash != 0 {
                    let passed = backslash.trailingZeroBitCount >> 3
                    i += passed
                    o += passed
                    break
                }
                i += 8
                o += 8
            }
            while i < n, from[i] != UInt8(ascii: "\\") {
                out[o] = from[i]
                i += 1
                o += 1
            }
            guard i + 1 < n else {
                if i < n {
                    out[o] = from[i]
                    o += 1
                }
                break
            }
            let escape = from[i + 1]
            switch escape {
            case UInt8(ascii: "n"): out[o] = 0x0A
            case UInt8(ascii: "t"): out[o] = 0x09
            case UInt8(ascii: "r"): out[o] = 0x0D
            case UInt8(ascii: "b"): out[o] = 0x08
            case UInt8(ascii: "f"): out[o] = 0x0C
            case UInt8(ascii: "u") where i + 6 <= n:
                var scalar = Self.hex4(from + i + 2)
                i += 6
                if (0xD800..<0xDC00).contains(scalar), i + 6 <= n, from[i] == UInt8(ascii: "\\"), from[i + 1] == UInt8(ascii: "u") {
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (Self.hex4(from + i + 2) &- 0xDC00) & 0x3FF
                    i += 6
                }
                o += Self.writeUTF8(scalar, to: out + o)
                continue
            default: out[o] = escape  // a quote, a backslash or a slash
            }
            i += 2
            o += 1
        }
        return o
    }

    /// The high bit of each byte of a little-endian word that may be a backslash, the lowest exact
    /// (as in `specialBytes`).
    @inline(__always) static func backslashBytes(_ word: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let backslash = word ^ (ones &* 0x5C)
        return (backslash &- ones) & ~backslash & (ones &* 0x80)
    }

    /// Four hexadecimal digits, known to be ones: `0`-`9` have 0 in their two top bits, `a`-`f`
    /// and `A`-`F` 1 and their value less 9 in their low four.
    @inline(__always) private static func hex4(_ digits: UnsafePointer<UInt8>) -> UInt32 {
        var value: UInt32 = 0
        for k in 0..<4 {
            let b = UInt32(digits[k])
            value = value << 4 | ((b & 0xF) + 9 * ((b >> 6) & 1))
        }
        return value
    }

    /// A scalar's UTF-8 at `out`; how many bytes.
    @inline(__always) private static func writeUTF8(_ scalar: UInt32, to out: UnsafeMutablePointer<UInt8>) -> Int {
        switch scalar {
        case ..<0x80:
            out[0] = UInt8(scalar)
            return 1
        case ..<0x800:
            out[0] = UInt8(0xC0 | scalar >> 6)
            out[1] = UInt8(0x80 | scalar & 0x3F)
            return 2
        case ..<0x10000:
            out[0] = UInt8(0xE0 | scalar >> 12)
            out[1] = UInt8(0x80 | (scalar >> 6) & 0x3F)
            out[2] = UInt8(0x80 | scalar & 0x3F)
            return 3
        default:
            out[0] = UInt8(0xF0 | (scalar >> 18) & 0x07)
            out[1] = UInt8(0x80 | (scalar >> 12) & 0x3F)
            out[2] = UInt8(0x80 | (scalar >> 6) & 0x3F)
            out[3] = UInt8(0x80 | scalar & 0x3F)
            return 4
        }
    }

    /// The bytes of the value that starts here (after whitespace), checked; the reader past it.
    public mutating func readValueBytes() throws -> UnsafeBufferPointer<UInt8> {
        _ = peek()
        let start = position
        try skipValue()
        return UnsafeBufferPointer(rebasing: bytes[start..<position])
    }

    /// Whether a number (its bytes, checked) would be written back by the model as the same
    /// number: an integer within Int64 (18 significant digits at most), any other number of 15
    /// significant digits at most and between 1e-300 and 1e300 (a Double then gives back the same
    /// decimal number).
    package static func numberKeepsItsMeaningThroughADouble(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        // Sixteen bytes or fewer without an exponent, as most numbers come: fifteen significant
        // digits at most beside a point (sixteen for an integer), and a magnitude within 1e±16,
        // kept without counting them: 870 instructions a bench record in this function, now 329
        // (callgrind).
        if bytes.count <= 16, !bytes.contains(where: { $0 | 0x20 == UInt8(ascii: "e") }) { return true }
        let range = bytes.indices
        var digits = 0  // significant: from the first that is not 0
        var leadingPlaces = 0  // of the integer part, from the first significant digit
        var zerosAfterPoint = 0  // before the first significant digit
        var inFraction = false
        var exponent = 0
        var exponentSign = 1
        var i = range.lowerBound
        var isInteger = true
        while i < range.upperBound {
            let b = bytes[i]
            switch b {
            case UInt8(ascii: "-"):
                break  // the number's sign; the exponent's is read below
            case UInt8(ascii: "."):
                inFraction = true
                isInteger = false
            case UInt8(ascii: "e"), UInt8(ascii: "E"):
                isInteger = false
                i += 1
                while i < range.upperBound {
                    if bytes[i] == UInt8(ascii: "-") { exponentSign = -1 }
                    if bytes[i] &- UInt8(ascii: "0") < 10 { exponent = min(exponent * 10 + Int(bytes[i] - UInt8(ascii: "0")), 100_000) }
                    i += 1
                }
                continue
            default:
                if digits == 0 && b == UInt8(ascii: "0") {
                    if inFraction { zerosAfterPoint += 1 }
                } else {
                    digits += 1
                    if !inFraction { leadingPlaces += 1 }
                }
            }
            i += 1
        }
        if isInteger { return digits <= 18 }
        guard digits > 0 else { return true }  // a zero
        let magnitude = (leadingPlaces > 0 ? leadingPlaces - 1 : -(zerosAfterPoint + 1)) + exponentSign * exponent
        return digits <= 15 && (-300...300).contains(magnitude)
    }

    /// A fresh reader over the same bytes, at `position` (a value's start this one found).
    @inlinable public func reader(at position: Int) -> JSONReader { JSONReader(bytes, at: position) }

    /// Bytes this reader read.
    @inlinable public func bytes(in range: Range<Int>) -> UnsafeBufferPointer<UInt8> { UnsafeBufferPointer(rebasing: bytes[range]) }

    /// The bytes read since `start`.
    @inlinable public func bytes(since start: Int) -> UnsafeBufferPointer<UInt8> { UnsafeBufferPointer(rebasing: bytes[start..<position]) }

    /// Where the next value starts, after whitespace.
    @inlinable public mutating func valueStart() -> Int {
        _ = peek()
        return position
    }
}

/// What the check of a value notes of the keys and numbers it passes.
private protocol ValueNote {
    mutating func key(isASCII: Bool)
    mutating func number(_ number: UnsafeBufferPointer<UInt8>)
}

private struct NothingNoted: ValueNote {
    @inline(__always) func key(isASCII: Bool) {}
    @inline(__always) func number(_ number: UnsafeBufferPointer<UInt8>) {}
}

/// Whether a value's JSON, written into jsonb as it came, is the JSON the model would write for
/// it: every key in ASCII (the model's dictionaries take Unicode-equivalent keys for one), every
/// number one the model's Int64 or Double gives back as the same number. Strings, booleans and
/// nulls keep theirs.
private struct MeaningKept: ValueNote {
    var kept = true

    mutating func key(isASCII: Bool) {
        if !isASCII { kept = false }
    }

    mutating func number(_ number: UnsafeBufferPointer<UInt8>) {
        if kept { kept = JSONReader.numberKeepsItsMeaningThroughADouble(number) }
    }
}
