import CloudKitModel
import Foundation
import Testing

@Suite struct JSONWriterTests {
    /// The writer checks text eight bytes at a time: a character to escape is found wherever it
    /// falls, and characters next to the escaped ones (a space, `!`, `#`, `[`, `]`, DEL, UTF-8
    /// continuation bytes) are left alone.
    @Test func stringsAreEscapedWhereverTheSpecialCharacterFalls() throws {
        let filler = Array("a !#[]^\u{7F}~é")
        for special in ["\"", "\\", "\n", "\r", "\t", "\u{0}", "\u{1}", "\u{1F}", "é", "😀", ""] {
            for length in 0..<20 {
                for position in 0...length {
                    var text = String((0..<length).map { filler[$0 % filler.count] })
                    text.insert(contentsOf: special, at: text.index(text.startIndex, offsetBy: position))
                    var writer = JSONWriter()
                    writer.writeString(text)
                    #expect(writer.bytes == Self.escaped(text), "\(text.debugDescription)")
                    #expect(try JSONDecoder().decode(String.self, from: Data(writer.bytes)) == text)
                }
            }
        }
    }

    /// Whole numbers below 2^53 and short decimals are written without `description`, and must
    /// read as it writes them: jsonb keeps a number's form (987.0 is not 987 in the `fields`
    /// column), so a record read in process and one read over HTTP would give different rows
    /// otherwise.
    @Test func doublesAreWrittenAsDescriptionWritesThem() {
        var values: [Double] = [
            0, -0.0, 1, -1, 0.5, 4.0, 987.0, -35.600877, 1e15, 1e16, 1e300, -1e-300, .leastNonzeroMagnitude, .greatestFiniteMagnitude,
            -.greatestFiniteMagnitude, -.leastNormalMagnitude, -.leastNonzeroMagnitude, -0.00012345678901234567, -9_007_199_254_740_991,
        ]
        for e in 0...60 {
            let power = (0..<e).reduce(1.0) { x, _ in x * 2 }
            values += [power - 1, power, power + 1, -power, power / 3, (power + 0.5).nextUp]
        }
        for e in 0...17 {
            let power = (0..<e).reduce(1.0) { x, _ in x * 10 }
            values += [power, power * 9 + 7, -power * 3, power + 0.25]
        }
        var random = SystemRandomNumberGenerator()
        for _ in 0..<100_000 {
            let bits = random.next() as UInt64
            values.append(Double(Int64(bitPattern: bits) >> Int64(bits % 60 + 4)))
            values.append(Double(bitPattern: random.next()))
            // Decimals, which are written without `description` when short: of every length up
            // to past a double's seventeen digits, with up to ten places, and a trailing zero.
            let places = Int(bits % 11)
            let digits = Int64(bitPattern: random.next()) >> Int64(random.next() % 64)
            let decimal = Double(digits) / (0..<places).reduce(1.0) { x, _ in x * 10 }
            values += [decimal, decimal.nextUp, Double((digits &* 10) % 1_000_000_000_000_000) / 1e7]
        }
        for edge in [0.001, 1e14] {
            values += [edge, edge.nextUp, edge.nextDown, -edge, edge * 1.5]
        }
        Self.expectWrittenAsDescription(values.filter(\.isFinite), room: JSONWriter.mostDoubleBytes) { $0.writeDouble($1) }
    }

    /// The doubles the short way is for take it (it would be slower, not wrong, if they did
    /// not): prices, ratings, coordinates in millionths, and both ends of its range.
    @Test func shortDecimalsAreWrittenTheShortWay() {
        for value in [4.5, -35.600877, 0.001, 99_999_999_999_999.9, 12.25, -0.125, 179.999999] {
            let room = UnsafeMutablePointer<UInt8>.allocate(capacity: JSONWriter.mostDoubleBytes)
            defer { room.deallocate() }
            let count = JSONWriter.writeShortDecimal(value, at: room)
            #expect(count.map { String(decoding: UnsafeBufferPointer(start: room, count: $0), as: UTF8.self) } == value.description)
        }
        for value in [0.000999, 1e14, 0.1 + 0.2, 1.0 / 3, 2.5e-5] {
            let room = UnsafeMutablePointer<UInt8>.allocate(capacity: JSONWriter.mostDoubleBytes)
            defer { room.deallocate() }
            #expect(JSONWriter.writeShortDecimal(value, at: room) == nil, "\(value) is left to description")
        }
    }

    /// Integers are written digit by digit after counting their digits: every length, both
    /// signs and both ends of Int64 must read as `description` writes them.
    @Test func integersAreWrittenAsDescriptionWritesThem() {
        var values: [Int64] = [0, .min, .max, .min + 1, .max - 1]
        var power: Int64 = 1
        for _ in 0...18 {
            values += [power - 1, power, power + 1, -power, -(power - 1), -(power + 1), power * 9 + 7]
            if power <= Int64.max / 10 { power *= 10 }
        }
        var random = SystemRandomNumberGenerator()
        for _ in 0..<100_000 {
            let bits = random.next() as UInt64
            values.append(Int64(bitPattern: bits) >> Int64(bits % 64))
        }
        Self.expectWrittenAsDescription(values, room: JSONWriter.mostIntegerBytes) { $0.writeInteger($1) }
    }

    /// Writes each value as `write` does; records the first that does not read as its
    /// `description`, or takes more than `room`, what a writer with memory of its own leaves for
    /// it (the fake source writes numbers straight into its pages).
    static func expectWrittenAsDescription<Value: CustomStringConvertible>(
        _ values: [Value], room: Int, _ write: (inout JSONWriter, Value) -> Void
    ) {
        for value in values {
            var writer = JSONWriter()
            write(&writer, value)
            let written = String(decoding: writer.bytes, as: UTF8.self)
            if written != value.description {
                Issue.record("\(value.description) was written \(written)")
                return
            }
            if writer.bytes.count > room {
                Issue.record("\(value.description) took \(writer.bytes.count) bytes, more than the \(room) a writer leaves for it")
                return
            }
        }
    }

    @Test func aNULIsSpelledOutForJSONBWhenAsked() {
        var writer = JSONWriter()
        writer.spellsOutNUL = true
        writer.writeString("long enough text\u{0}")
        #expect(String(decoding: writer.bytes, as: UTF8.self) == #""long enough text\\u0000""#)
    }

    @Test func fieldsAreWrittenWithTheirTypeTags() {
        let fields: [FieldValue] = [
            .string("s"), .int64(-1), .double(0.5), .timestamp(7), .bytes("AA=="), .encryptedBytes("AQ=="),
            .reference(Reference(recordName: "r")), .location(.object(["latitude": .double(1)])),
            .asset(tag: "ASSETID", .object(["size": .int(3)])), .list(tag: "STRING_LIST", [.string("x")]),
            .unknown(tag: "ODD\"TAG", .null),
        ]
        var writer = JSONWriter()
        for field in fields { writer.write(field: field) }
        #expect(
            String(decoding: writer.bytes, as: UTF8.self) == """
                {"type":"STRING","value":"s"}{"type":"INT64","value":-1}{"type":"DOUBLE","value":0.5}\
                {"type":"TIMESTAMP","value":7}{"type":"BYTES","value":"AA=="}{"type":"ENCRYPTED_BYTES","value":"AQ=="}\
                {"type":"REFERENCE","value":{"action":"NONE","recordName":"r"}}{"type":"LOCATION","value":{"latitude":1.0}}\
                {"type":"ASSETID","value":{"size":3}}{"type":"STRING_LIST","value":["x"]}{"type":"ODD\\"TAG","value":null}
                """)
    }

    /// JSON's escaping, byte by byte.
    static func escaped(_ text: String) -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "\"")]
        for c in text.utf8 {
            switch c {
            case UInt8(ascii: "\""): out += Array(#"\""#.utf8)
            case UInt8(ascii: "\\"): out += Array(#"\\"#.utf8)
            case 0x0A: out += Array(#"\n"#.utf8)
            case 0x0D: out += Array(#"\r"#.utf8)
            case 0x09: out += Array(#"\t"#.utf8)
            case 0..<0x20: out += Array(String(format: "\\u%04x", c).utf8)
            default: out.append(c)
            }
        }
        out.append(UInt8(ascii: "\""))
        return out
    }
}
