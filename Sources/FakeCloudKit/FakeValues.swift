import CloudKitModel

/// SplitMix64: a small, fast, well-mixed generator; the fake feed's only source of variety.
struct SplitMix {
    var state: UInt64

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        return SplitMix.mix(state)
    }

    static func mix(_ x: UInt64) -> UInt64 {
        var z = x
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    static func hash(_ values: UInt64...) -> UInt64 {
        var h: UInt64 = 0x243F_6A88_85A3_08D3
        for v in values { h = mix(h ^ mix(v &+ 0x9E37_79B9_7F4A_7C15)) }
        return h
    }
}

enum Hex {
    static let digits = Array("0123456789abcdef".utf8)

    static func append(_ v: UInt64, nibbles: Int, to out: inout [UInt8]) {
        for i in stride(from: nibbles - 1, through: 0, by: -1) {
            out.append(digits[Int((v >> (UInt64(i) * 4)) & 0xF)])
        }
    }

    /// An upper-case UUID-shaped name, as CloudKit apps usually make.
    static func uuid(_ a: UInt64, _ b: UInt64) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(36)
        append(a >> 32, nibbles: 8, to: &out)
        out.append(UInt8(ascii: "-"))
        append(a >> 16, nibbles: 4, to: &out)
        out.append(UInt8(ascii: "-"))
        append(a, nibbles: 4, to: &out)
        out.append(UInt8(ascii: "-"))
        append(b >> 48, nibbles: 4, to: &out)
        out.append(UInt8(ascii: "-"))
        append(b, nibbles: 12, to: &out)
        return String(decoding: out.map { $0 >= 97 ? $0 - 32 : $0 }, as: UTF8.self)
    }

    static func short(_ v: UInt64) -> String {
        var out: [UInt8] = []
        append(v, nibbles: 8, to: &out)
        return String(decoding: out, as: UTF8.self)
    }
}

enum FakeText {
    static let words = [
        "note", "plan", "idea", "draft", "list", "garden", "recipe", "travel", "budget", "meeting",
        "café", "naïve", "日本語", "メモ", "Zürich", "😀", "crème brûlée", "Ελληνικά", "עברית", "한국어",
        "\"quoted\"", "back\\slash", "tab\there", "line\nbreak", "{braces}", "comma,separated",
    ]

    static func words(_ r: inout SplitMix, count: Int) -> String {
        var s = ""
        for i in 0..<count {
            if i > 0 { s += " " }
            s += words[Int(r.next() % UInt64(words.count))]
        }
        return s
    }

    static func title(_ r: inout SplitMix) -> String {
        words(&r, count: 1 + Int(r.next() % 4)) + " #\(r.next() % 1000)"
    }

    static func sentence(_ r: inout SplitMix) -> String {
        words(&r, count: 3 + Int(r.next() % 12)) + "."
    }
}

enum FakeBytes {
    static func make(_ r: inout SplitMix, count: Int) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(count)
        var word = r.next()
        for i in 0..<count {
            if i % 8 == 0 && i > 0 { word = r.next() }
            out.append(UInt8(truncatingIfNeeded: word >> ((UInt64(i) % 8) * 8)))
        }
        return out
    }
}

enum FakeLocation {
    static func make(_ r: inout SplitMix) -> JSONValue {
        .object([
            "latitude": .double(Double(Int64(r.next() % 180_000_000) - 90_000_000) / 1_000_000),
            "longitude": .double(Double(Int64(r.next() % 360_000_000) - 180_000_000) / 1_000_000),
            "horizontalAccuracy": .double(Double(r.next() % 100)),
            "verticalAccuracy": .double(Double(r.next() % 100)),
            "altitude": .double(Double(r.next() % 4000)),
            "speed": .double(0),
            "course": .double(Double(r.next() % 360)),
            "timestamp": .int(1_650_000_000_000 + Int64(r.next() % 10_000_000_000)),
        ])
    }
}

