/// Writes JSON into a byte buffer without Foundation, for the hot path: the `fields` jsonb column
/// and asset or location columns are written this way for every record of a backfill.
public struct JSONWriter {
    public var bytes: [UInt8]
    /// PostgreSQL's jsonb refuses `\u0000`; when set, a NUL is written as the six characters
    /// `\u0000` (an escaped backslash), so the information survives as text.
    public var spellsOutNUL = false
    /// Object keys sorted, so that the same value always gives the same bytes (logs, request
    /// bodies). Off on the hot paths (jsonb columns, the fake server's pages), where the order
    /// does not matter and sorting was most of the cost.
    public var sortsKeys = true

    public init(capacity: Int = 256) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    /// Appends `s` as it is: JSON text already.
    @inline(__always) public mutating func raw(_ s: StaticString) {
        append(s.utf8Start, count: s.utf8CodeUnitCount)
    }

    /// Appends `count` bytes in one go: one capacity check and a copy, where
    /// `append(contentsOf:)` takes a generic path that costs more than copying the few bytes
    /// of a key or a literal.
    @inline(__always) mutating func append(_ source: UnsafePointer<UInt8>, count: Int) {
        bytes.append(addingCapacity: count) { span in
            span.withUnsafeMutableBufferPointer { buffer, initialized in
                buffer.baseAddress!.initialize(from: source, count: count)
                initialized = count
            }
        }
    }

    public mutating func write(_ value: JSONValue) {
        switch value {
        case .null: raw("null")
        case .bool(let b): b ? raw("true") : raw("false")
        case .int(let i): writeInteger(i)
        case .double(let d): writeDouble(d)
        case .string(let s): writeString(s)
        case .array(let items):
            bytes.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { bytes.append(UInt8(ascii: ",")) }
                write(item)
            }
            bytes.append(UInt8(ascii: "]"))
        case .object(let members):
            bytes.append(UInt8(ascii: "{"))
            if sortsKeys {
                for (i, key) in members.keys.sorted().enumerated() {
                    if i > 0 { bytes.append(UInt8(ascii: ",")) }
                    writeString(key)
                    bytes.append(UInt8(ascii: ":"))
                    write(members[key]!)
                }
            } else {
                var first = true
                for (key, member) in members {
                    if !first { bytes.append(UInt8(ascii: ",")) }
                    first = false
                    writeString(key)
                    bytes.append(UInt8(ascii: ":"))
                    write(member)
                }
            }
            bytes.append(UInt8(ascii: "}"))
        }
    }

    /// `{"type": TAG, "value": …}`, the wire form of a field.
    public mutating func write(field: FieldValue) {
        // The fixed tags are written with the keys around them as one literal: this is done for
        // every field of every record, and the tags need no escaping.
        switch field {
        case .string: raw("{\"type\":\"STRING\",\"value\":")
        case .int64: raw("{\"type\":\"INT64\",\"value\":")
        case .double: raw("{\"type\":\"DOUBLE\",\"value\":")
        case .timestamp: raw("{\"type\":\"TIMESTAMP\",\"value\":")
        case .bytes: raw("{\"type\":\"BYTES\",\"value\":")
        case .encryptedBytes: raw("{\"type\":\"ENCRYPTED_BYTES\",\"value\":")
        case .reference: raw("{\"type\":\"REFERENCE\",\"value\":")
        case .location: raw("{\"type\":\"LOCATION\",\"value\":")
        case .asset, .list, .unknown:
            raw("{\"type\":")
            writeString(field.typeTag)
            raw(",\"value\":")
        }
        writeValue(of: field)
        bytes.append(UInt8(ascii: "}"))
    }

    /// The `value` part of a field, written directly rather than through `JSONValue`.
    public mutating func writeValue(of field: FieldValue) {
        switch field {
        case .string(let s), .bytes(let s), .encryptedBytes(let s): writeString(s)
        case .int64(let i), .timestamp(let i): writeInteger(i)
        case .double(let d): writeDouble(d)
        case .list(_, let items):
            bytes.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { bytes.append(UInt8(ascii: ",")) }
                writeValue(of: item)
            }
            bytes.append(UInt8(ascii: "]"))
        case .reference(let r) where !sortsKeys:
            // Written directly: `field.json` would build dictionaries first.
            raw("{\"recordName\":")
            writeString(r.recordName)
            if let zone = r.zoneID { writeZoneMember(zone) }
            if let action = r.action {
                raw(",\"action\":")
                writeString(action)
            }
            bytes.append(UInt8(ascii: "}"))
        case .reference, .asset, .location, .unknown: write(field.json)
        }
    }

    /// A reference's `,"zoneID":{…}`: its zone's name, owner and type (when known).
    public mutating func writeZoneMember(_ zone: ZoneID) {
        raw(",\"zoneID\":{\"zoneName\":")
        writeString(zone.zoneName)
        raw(",\"ownerRecordName\":")
        writeString(zone.ownerRecordName)
        if let type = zone.zoneType {
            raw(",\"zoneType\":")
            writeString(type)
        }
        bytes.append(UInt8(ascii: "}"))
    }

    /// An object of fields: the `fields` column.
    public mutating func write(fields: [String: FieldValue], keys: [String]) {
        bytes.append(UInt8(ascii: "{"))
        for (i, key) in keys.enumerated() {
            if i > 0 { bytes.append(UInt8(ascii: ",")) }
            writeString(key)
            bytes.append(UInt8(ascii: ":"))
            write(field: fields[key]!)
        }
        bytes.append(UInt8(ascii: "}"))
    }

    public mutating func writeInteger(_ value: Int64) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Self.mostIntegerBytes) { digits in
            append(digits.baseAddress!, count: Self.writeInteger(value, at: digits.baseAddress!))
        }
    }

    /// The most bytes `writeInteger(_:at:)` writes: Int64.min's sign and nineteen digits.
    package static let mostIntegerBytes = 20

    /// Writes `value` in decimal at `out`, which has room for `mostIntegerBytes`; how many bytes
    /// it took. For a writer with memory of its own (the fake source writes its pages' numbers
    /// straight into them).
    @inline(__always) package static func writeInteger(_ value: Int64, at out: UnsafeMutablePointer<UInt8>) -> Int {
        var magnitude = value.magnitude
        var count = 1
        var bound: UInt64 = 10
        // Int64's magnitudes stop short of 10^19 (`bound` is 10^19 at most, within UInt64).
        while magnitude >= bound, count < 19 {
            count += 1
            bound &*= 10
        }
        if value < 0 {
            out[0] = UInt8(ascii: "-")
            count += 1
        }
        var index = count
        repeat {
            index -= 1
            out[index] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: magnitude % 10)
            magnitude /= 10
        } while magnitude > 0
        return count
    }

    public mutating func writeDouble(_ value: Double) {
        // JSON has no NaN or infinity; PostgreSQL's jsonb refuses them, so they are written as
        // strings, which keeps the information.
        if value.isNaN {
            writeString("NaN")
            return
        }
        if value.isInfinite {
            writeString(value < 0 ? "-Infinity" : "Infinity")
            return
        }
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Self.mostDoubleBytes) { text in
            append(text.baseAddress!, count: Self.writeFiniteDouble(value, at: text.baseAddress!))
        }
    }

    /// The most bytes `writeFiniteDouble(_:at:)` writes (`-2.2250738585072014e-308` takes 24).
    package static let mostDoubleBytes = 32

    /// Writes a finite double as `description` spells it at `out`, which has room for
    /// `mostDoubleBytes`; how many bytes it took.
    @inline(__always) package static func writeFiniteDouble(_ value: Double, at out: UnsafeMutablePointer<UInt8>) -> Int {
        // A whole number below 2^53, the most common double (a location's accuracies, altitude
        // and course, a rating of 4.0), is written as its integer and ".0": what `description`
        // gives it (JSONWriterTests holds the two together), at a small part of the cost, which
        // was 6% of the in-process source's instructions a record (Benchmarks/run).
        if value.rounded(.towardZero) == value, value.magnitude < 9_007_199_254_740_992 {
            var count = 0
            if value == 0, value.sign == .minus {  // -0.0
                out[0] = UInt8(ascii: "-")
                count = 1
            }
            count += writeInteger(Int64(value), at: out + count)
            out[count] = UInt8(ascii: ".")
            out[count + 1] = UInt8(ascii: "0")
            return count + 2
        }
        if let count = writeShortDecimal(value, at: out) { return count }
        var text = value.description
        return text.withUTF8 { utf8 in
            precondition(utf8.count <= mostDoubleBytes, "a double's description takes at most \(mostDoubleBytes) bytes")
            out.initialize(from: utf8.baseAddress!, count: utf8.count)
            return utf8.count
        }
    }

    /// Writes a double that is a decimal of at most fifteen significant digits and at most
    /// `mostShortDecimalPlaces` places, between 0.001 and 10^14 in magnitude (a price, a rating,
    /// a coordinate in millionths of a degree), as `description` writes it, or returns nil. Such
    /// a decimal is the only one of fifteen digits or fewer that reads as the double (a double
    /// keeps fifteen: DBL_DIG), so it is the shortest that does, which `description` writes, in
    /// positional notation in that range. `description` cost about 450 instructions a double
    /// (`Benchmarks/run`, in process); this takes about a hundred, and a double it does not
    /// write (a coordinate to full precision) costs the eight tries more, about sixty.
    @inline(__always) package static func writeShortDecimal(_ value: Double, at out: UnsafeMutablePointer<UInt8>) -> Int? {
        let magnitude = value.magnitude
        guard magnitude >= 0.001, magnitude < 1e14 else { return nil }
        var scale = 1.0
        for places in 1...mostShortDecimalPlaces {
            scale *= 10  // exact: 10^8 is well within a double's 53 bits
            let scaled = magnitude * scale
            guard scaled < 1e15 else { return nil }
            // Rounded by conversion: `rounded()` is a call into libm on x86-64's baseline.
            let digits = UInt64(scaled + 0.5)
            let whole = Double(digits)
            // The product is off by two roundings at most (the value's own and the product's,
            // 2^-52 of it); the division, correctly rounded, gives the double nearest to the
            // decimal, which must be the value itself. Fifteen digits at most, as said above.
            guard (scaled - whole).magnitude <= scaled * 0x1p-50, digits < 1_000_000_000_000_000, whole / scale == magnitude else { continue }
            return writeDecimal(digits, places: places, negative: value < 0, at: out)
        }
        return nil
    }

    /// The most places `writeShortDecimal` tries.
    static let mostShortDecimalPlaces = 8

    /// Writes `digits` × 10^-`places` in positional notation, at least one digit before the point.
    @inline(__always) private static func writeDecimal(_ digits: UInt64, places: Int, negative: Bool, at out: UnsafeMutablePointer<UInt8>) -> Int {
        var at = out
        if negative {
            at[0] = UInt8(ascii: "-")
            at += 1
        }
        // The digits are written past the room the point and any zeros before them need, then
        // moved down: at most 2 + 8 + 15 bytes, within `mostDoubleBytes` with the sign.
        let written = at + 2 + places
        let count = writeInteger(Int64(digits), at: written)
        if count > places {
            let whole = count - places
            for i in 0..<whole { at[i] = written[i] }
            at[whole] = UInt8(ascii: ".")
            for i in 0..<places { at[whole + 1 + i] = written[whole + i] }
            return at + whole + 1 + places - out
        }
        at[0] = UInt8(ascii: "0")
        at[1] = UInt8(ascii: ".")
        let zeros = places - count
        for i in 0..<zeros { at[2 + i] = UInt8(ascii: "0") }
        for i in 0..<count { at[2 + zeros + i] = written[i] }
        return at + 2 + places - out
    }

    public mutating func writeString(_ s: String) {
        var s = s
        s.withUTF8 { writeString(utf8: $0) }
    }

    /// `writeString` for text at hand as UTF-8, without making a String of it.
    public mutating func writeString(utf8: UnsafeBufferPointer<UInt8>) {
        guard JSONWriter.anyNeedsEscaping(utf8) else {
            // The usual case: the text as is between quotes, appended at once.
            bytes.append(addingCapacity: utf8.count + 2) { span in
                span.withUnsafeMutableBufferPointer { buffer, initialized in
                    buffer[0] = UInt8(ascii: "\"")
                    if let base = utf8.baseAddress { (buffer.baseAddress! + 1).initialize(from: base, count: utf8.count) }
                    buffer[utf8.count + 1] = UInt8(ascii: "\"")
                    initialized = utf8.count + 2
                }
            }
            return
        }
        bytes.append(UInt8(ascii: "\""))
        var start = 0
        for i in 0..<utf8.count {
            let c = utf8[i]
            if c >= 0x20 && c != UInt8(ascii: "\"") && c != UInt8(ascii: "\\") { continue }
            if start < i { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start..<i])) }
            start = i + 1
            switch c {
            case UInt8(ascii: "\""): raw("\\\"")
            case UInt8(ascii: "\\"): raw("\\\\")
            case 0x0A: raw("\\n")
            case 0x0D: raw("\\r")
            case 0x09: raw("\\t")
            case 0 where spellsOutNUL: raw("\\\\u0000")
            default:
                let hex: [UInt8] = Array("0123456789abcdef".utf8)
                raw("\\u00")
                bytes.append(hex[Int(c >> 4)])
                bytes.append(hex[Int(c & 0xF)])
            }
        }
        if start < utf8.count { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start...])) }
        bytes.append(UInt8(ascii: "\""))
    }

    /// Whether any byte of `text` is a control character, `"` or a backslash.
    package static func anyNeedsEscaping(_ text: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = text.baseAddress else { return false }
        var i = 0
        // Eight bytes at a time: the text of every record is checked.
        while text.count - i >= 8 {
            if anyNeedsEscaping(UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self)) { return true }
            i += 8
        }
        while i < text.count {
            let c = text[i]
            if c < 0x20 || c == UInt8(ascii: "\"") || c == UInt8(ascii: "\\") { return true }
            i += 1
        }
        return false
    }

    /// Whether any of the eight bytes of `word` is a control character, `"` or a backslash. SWAR
    /// ("SIMD within a register", Bit Twiddling Hacks' `hasless`): a byte below `n` (at most
    /// 128) sets its top bit in `(x - n·0x01…01) & ~x & 0x80…80`, and no other byte can make the
    /// result non-zero; a byte equal to `c` is a zero byte of `x ^ c·0x01…01`.
    @inline(__always) static func anyNeedsEscaping(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        func bytesBelow(_ x: UInt64, _ n: UInt64) -> UInt64 { (x &- ones &* n) & ~x & highs }
        return bytesBelow(word, 0x20) | bytesBelow(word ^ (ones &* 0x22), 1) | bytesBelow(word ^ (ones &* 0x5C), 1) != 0
    }
}

extension JSONValue {
    /// Compact JSON text, keys sorted.
    public var jsonText: String {
        var w = JSONWriter()
        w.write(self)
        return String(decoding: w.bytes, as: UTF8.self)
    }
}
