import Foundation
import Testing

@testable import CloudKitModel

/// A number that is not an integer is read as the Double `strtod` reads, to the last bit, whether
/// it takes the exact short way (`JSONReader.exactDouble`) or `strtod` itself.
struct JSONNumberTests {
    /// The Double that a JSON reader gives for the text, which must be a number with a fraction
    /// or an exponent.
    static func read(_ text: String) throws -> Double {
        let bytes = Array(text.utf8)
        return try bytes.withUnsafeBufferPointer { buffer in
            var reader = JSONReader(buffer)
            switch try reader.readNumber() {
            case .double(let d): return d
            case .int(let i): return Double(i)
            case .negativeZero: return -0.0
            }
        }
    }

    static func strtodValue(_ text: String) -> Double { text.withCString { strtod($0, nil) } }

    static func takesTheShortWay(_ text: String) -> Bool {
        Array(text.utf8).withUnsafeBufferPointer { JSONReader.exactDouble($0) != nil }
    }

    @Test(arguments: [
        "4.5", "0.1", "-0.0", "0.0", "1e22", "1E-22", "-2.5E-3", "1.5e+3", "12345678901234.5", "0.000000000000000000001",
        "123456789012345e7", "9.99999999999999e22", "1e0", "0.30000000000000004", "8.98846567431158e307",
    ])
    func numbersTheShortWayTakesAreReadAsStrtodReadsThem(_ text: String) throws {
        #expect(Self.takesTheShortWay(text) == (text != "0.30000000000000004" && text != "8.98846567431158e307"), "\(text)")
        #expect(try Self.read(text).bitPattern == Self.strtodValue(text).bitPattern, "\(text)")
    }

    @Test(arguments: [
        "1e23", "1e-23", "1234567890123456.7", "9007199254740993.0", "1.7976931348623157e308", "5e-324", "2.2250738585072014e-308",
        "1e400", "1e-400", "0.1234567890123456789", "9.999999999999999e22", "0.00000000000000000000001",
    ])
    func numbersPastItAreLeftToStrtod(_ text: String) throws {
        #expect(!Self.takesTheShortWay(text), "\(text)")
        #expect(try Self.read(text).bitPattern == Self.strtodValue(text).bitPattern, "\(text)")
    }

    /// Random numbers around the short way's limits: up to 17 digits, a point anywhere, an
    /// exponent or none. The same numbers every run (a fixed seed), so a failure can be replayed.
    @Test func randomNumbersAreReadAsStrtodReadsThem() throws {
        var state: UInt64 = 0x5EED_2026_1127
        func next(_ bound: Int) -> Int {
            // SplitMix64.
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return Int((z ^ (z >> 31)) % UInt64(bound))
        }
        var shortWay = 0
        let total = 50_000
        for _ in 0..<total {
            let count = 1 + next(17)
            var digits = (0..<count).map { _ in Character(String(next(10))) }
            if digits.count > 1 && digits[0] == "0" { digits[0] = "1" }
            let point = next(count + 1)
            var text = (next(2) == 0 ? "-" : "") + String(digits[..<point].isEmpty ? ["0"] : Array(digits[..<point]))
            text += "." + (point < count ? String(digits[point...]) : "0")
            if next(2) == 0 { text += "e\(next(61) - 30)" }
            if Self.takesTheShortWay(text) { shortWay += 1 }
            #expect(try Self.read(text).bitPattern == Self.strtodValue(text).bitPattern, "\(text)")
        }
        #expect(shortWay > total / 4, "the short way was taken \(shortWay) times in \(total)")
        #expect(shortWay < total, "strtod was left numbers too")
    }

    /// SplitMix64, for tests that want many inputs and the same ones each run.
    struct Numbers {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func next(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }
    }

    /// Eight bytes at a time find the same digits, and the same number, as one byte at a time:
    /// words of digits mixed with what follows a number and with bytes near 0xFF, whose carry
    /// the test of a word must not let turn a byte after them into a digit.
    @Test func aWordsLeadingDigitsAreTheOnesByteByByteFinds() {
        var random = Numbers(state: 0x5EED_2026_1128)
        let others: [UInt8] = [0x2E, 0x65, 0x45, 0x2C, 0x7D, 0x5D, 0x20, 0x2F, 0x3A, 0x00, 0x29, 0x2F, 0x3F, 0xFA, 0xFF, 0xF9, 0x06, 0xC0, 0x39 &+ 0x40]
        for _ in 0..<300_000 {
            let bytes = (0..<8).map { _ in random.next(3) > 0 ? UInt8(ascii: "0") + UInt8(random.next(10)) : others[random.next(others.count)] }
            let word = bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
            let count = bytes.prefix { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }.count
            let value = bytes.prefix(count).reduce(UInt64(0)) { $0 * 10 + UInt64($1 - UInt8(ascii: "0")) }
            let found = JSONReader.leadingDigits(UInt64(littleEndian: word))
            #expect(found.count == count && found.value == value, "\(bytes)")
        }
    }

    /// Integers of every length up to 25 digits, at the end of the data or followed by what may
    /// follow them and more, read as their text says: an Int64 when one holds them, else the Double.
    @Test func integersOfEveryLengthReadAsTheirDigitsSay() throws {
        var random = Numbers(state: 0x1_2345_6789)
        for length in 1...25 {
            for _ in 0..<400 {
                var digits = (0..<length).map { _ in Character(String(random.next(10))) }
                if length > 1, digits[0] == "0" { digits[0] = Character(String(1 + random.next(9))) }
                let text = (random.next(2) == 0 ? "-" : "") + String(digits)
                let after = ["", ",", "}", "]", " ", ".5", "e3", "E-2"][random.next(8)]
                let whole = text + after
                // Bytes after the number, so that its last digits are read in a word of their own
                // as often as at the end of the data.
                let padding = String(repeating: "}", count: random.next(9))
                let number = try Array((whole + padding).utf8).withUnsafeBufferPointer { buffer in
                    var reader = JSONReader(buffer)
                    return try reader.readNumber()
                }
                switch number {
                case .int(let i):
                    #expect(after.isEmpty || ",}] ".contains(after), "\(whole)")
                    #expect(Int64(text) == i, "\(whole)")
                case .negativeZero:
                    #expect(Int64(text) == 0 && text.hasPrefix("-"), "\(whole)")
                case .double(let d):
                    #expect(Int64(text) == nil || !(after.isEmpty || ",}] ".contains(after)), "\(whole)")
                    let read = after.first.map { ".eE".contains($0) } == true ? whole : text
                    #expect(d.bitPattern == Self.strtodValue(read).bitPattern, "\(whole)")
                }
            }
        }
    }
}

/// A number kept in jsonb as it came (`JSONReader.numberKeepsItsMeaningThroughADouble`) is one the
/// model would have written as the same decimal number: read as an integer, or as a Double and
/// written back by `JSONWriter`.
struct NumbersKeptAsTheyCameTests {
    static func writtenByTheModel(_ text: String) throws -> String {
        let bytes = Array(text.utf8)
        let number = try bytes.withUnsafeBufferPointer { buffer in
            var reader = JSONReader(buffer)
            return try reader.readNumber()
        }
        var writer = JSONWriter()
        switch number {
        case .int(let i): writer.writeInteger(i)
        case .double(let d): writer.writeDouble(d)
        case .negativeZero: writer.writeDouble(-0.0)
        }
        return String(decoding: writer.bytes, as: UTF8.self)
    }

    static func kept(_ text: String) -> Bool {
        Array(text.utf8).withUnsafeBufferPointer { JSONReader.numberKeepsItsMeaningThroughADouble($0) }
    }

    /// The same decimal number, to the last digit: the same sign, significant digits and
    /// exponent (zero whatever its sign).
    static func same(_ a: String, _ b: String) -> Bool {
        func normalized(_ text: String) -> (negative: Bool, digits: [Character], exponent: Int) {
            let negative = text.hasPrefix("-")
            let parts = text.drop(while: { $0 == "-" }).split(maxSplits: 1, whereSeparator: { $0 == "e" || $0 == "E" })
            let mantissa = parts[0].split(separator: ".", omittingEmptySubsequences: false)
            let fraction = mantissa.count > 1 ? Array(mantissa[1]) : []
            var digits = Array(mantissa[0]) + fraction
            var exponent = (parts.count > 1 ? Int(parts[1])! : 0) - fraction.count
            while digits.first == "0" { digits.removeFirst() }
            while digits.last == "0" {
                digits.removeLast()
                exponent += 1
            }
            return digits.isEmpty ? (false, [], 0) : (negative, digits, exponent)
        }
        return normalized(a) == normalized(b)
    }

    @Test(arguments: [
        ("1234567890.12345", true), ("-123456789.1234", true), ("1234567890123456", true), ("-0.0000000000001", true),
        ("123456789012345678", true), ("0.5", true), ("-0", true),
        // Sixteen significant digits, in seventeen bytes or more: a Double need not give them back.
        ("9007199254740.993", false), ("9.999999999999999", false), ("1234567890123456.7", false), ("1234567890123456789", false),
        ("1e5", true), ("1.5E-300", true), ("1e-301", false), ("1e309", false),
    ])
    func numbersNearTheEdgesAreKeptOrNot(_ text: String, _ expected: Bool) throws {
        #expect(Self.kept(text) == expected, "\(text)")
        if expected { #expect(Self.same(text, try Self.writtenByTheModel(text)), "\(text)") }
    }

    @Test func everyNumberKeptComesBackFromTheModelAsTheSameNumber() throws {
        var seed: UInt64 = 16
        func next(_ bound: Int) -> Int {
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((seed >> 33) % UInt64(bound))
        }
        var kept = 0
        for _ in 0..<50_000 {
            // Up to 19 digits, a point anywhere or none, a sign, now and then an exponent.
            let count = 1 + next(19)
            var digits = String((0..<count).map { _ in Character(String(next(10))) })
            while digits.count > 1, digits.first == "0", next(4) > 0 { digits.removeFirst() }
            if digits.count > 1, digits.first == "0" { digits = "0." + digits.dropFirst() }
            var text = (next(3) == 0 ? "-" : "") + digits
            if !text.contains("."), next(2) == 0, digits.count > 1 {
                let at = text.index(text.endIndex, offsetBy: -(1 + next(digits.count - 1)))
                text.insert(".", at: at)
            }
            if next(6) == 0 { text += "e" + (next(2) == 0 ? "-" : "") + String(next(320)) }
            guard Self.kept(text) else { continue }
            kept += 1
            let written = try Self.writtenByTheModel(text)
            #expect(Self.same(text, written), "\(text) came back as \(written)")
        }
        #expect(kept > 10_000)
    }
}
