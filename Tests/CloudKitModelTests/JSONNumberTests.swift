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
