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
}
