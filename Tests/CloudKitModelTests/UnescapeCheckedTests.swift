import Testing

@testable import CloudKitModel

/// `JSONReader.unescapeChecked` gives a kept string's text as the model reads it (`readString`):
/// every escape JSON has, at every place of an eight-byte word and in the byte-by-byte tail,
/// between runs of ASCII and of other text; and it never writes past the room it is given, even
/// for bytes no check let through.
struct UnescapeCheckedTests {
    /// The text of `raw` (a string's bytes between its quotes) by `unescapeChecked`, written into
    /// a room of `raw.count` bytes followed by eight canary bytes, which must be left as they were.
    static func unescaped(_ raw: [UInt8]) -> (text: [UInt8], canariesKept: Bool) {
        var room = [UInt8](repeating: 0xA5, count: raw.count + 8)
        let count = raw.withUnsafeBufferPointer { raw in
            room.withUnsafeMutableBufferPointer { JSONReader.unescapeChecked(raw, into: $0.baseAddress!) }
        }
        return (Array(room[..<count]), room[raw.count...].allSatisfy { $0 == 0xA5 })
    }

    /// The model's text of the same string, read from its JSON.
    static func modelText(_ raw: [UInt8]) throws -> [UInt8] {
        let json = [UInt8(ascii: "\"")] + raw + [UInt8(ascii: "\"")]
        return try json.withUnsafeBufferPointer { buffer in
            var reader = JSONReader(buffer)
            return Array(try reader.readString().utf8)
        }
    }

    /// Whether the check keeps a field holding this string as its JSON (`unescapeChecked` is
    /// only ever given strings it kept).
    static func kept(_ raw: [UInt8]) -> Bool {
        let json = Array(#"{"s":{"value":""#.utf8) + raw + Array(#"","type":"STRING"}}"#.utf8)
        guard case .json? = (try? RecordFields.read(from: JSONBytes.copying(json), at: [0]))?.first else { return false }
        return true
    }

    static let escapes = [
        #"\""#, #"\\"#, #"\/"#, #"\b"#, #"\f"#, #"\n"#, #"\r"#, #"\t"#, #"\u0041"#, #"\u0001"#, #"\u001F"#, #"\u007f"#,
        #"\u0080"#, #"\u00e9"#, #"\u07FF"#, #"\u0800"#, #"\u65e5"#, #"\uFFFF"#, #"\ud83d\ude00"#, #"\uD800\uDC00"#,
        #"\uDBFF\uDFFF"#,
    ]

    /// Every escape, and every pair of them, after 0 to 17 bytes of ASCII or of other text and
    /// before 0, 1 or 9.
    @Test func everyEscapeAtEveryPlaceOfAWord() throws {
        var cases = Self.escapes
        for first in Self.escapes { cases += Self.escapes.map { first + $0 } }
        var checked = 0
        var disagreements: [String] = []
        for escape in cases {
            for filler in ["abcdefghijklmnopq", "é日😀ü", "z"] {
                for before in 0...17 {
                    for after in [0, 1, 9] {
                        let text = String(repeating: filler, count: 17).prefix(before) + escape + String(repeating: "y", count: after)
                        let raw = Array(text.utf8)
                        guard Self.kept(raw) else { continue }
                        let (unescaped, canariesKept) = Self.unescaped(raw)
                        if unescaped != (try Self.modelText(raw)) || !canariesKept { disagreements.append(text) }
                        checked += 1
                    }
                }
            }
        }
        #expect(checked > 40_000)
        #expect(disagreements.isEmpty, "the first: \(disagreements.prefix(5))")
    }

    /// Strings without any escape, and strings that are nothing but escapes.
    @Test func plainTextAndEscapesAlone() throws {
        for text in ["", "a", "plain text longer than a word", "crème brûlée 😀", #"\n\n\n\n\n\n\n\n\n"#, #"\u00e9\u00e9\u00e9"#] {
            let raw = Array(text.utf8)
            #expect(Self.kept(raw))
            let (unescaped, canariesKept) = Self.unescaped(raw)
            #expect(unescaped == (try Self.modelText(raw)), "\(text)")
            #expect(canariesKept)
        }
    }

    /// Random text from a note's alphabet, each character written as itself, as its short escape
    /// or as a \u escape: the same text as the model's.
    @Test func randomTextAgreesWithTheModel() throws {
        let characters: [Character] = ["a", "Z", " ", "\"", "\\", "/", "\n", "\t", "\r", "\u{08}", "\u{0C}", "\u{01}", "é", "日", "😀", "ü"]
        var state: UInt64 = 0x2545_F491_4F6C_DD1D
        func next(_ bound: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((state >> 33) % UInt64(bound))
        }
        var disagreements: [String] = []
        for _ in 0..<20_000 {
            var text = ""
            for _ in 0..<next(40) {
                let character = characters[next(characters.count)]
                let scalar = character.unicodeScalars.first!.value
                let short: [Character: String] = ["\"": #"\""#, "\\": #"\\"#, "\n": #"\n"#, "\t": #"\t"#, "\r": #"\r"#, "\u{08}": #"\b"#, "\u{0C}": #"\f"#]
                let mustEscape = scalar < 0x20 || character == "\"" || character == "\\"
                switch next(3) {
                case 0 where !mustEscape: text.append(character)
                case 1 where short[character] != nil: text += short[character]!
                default: text += String(character).utf16.map { "\\u" + String($0, radix: 16).leftPadded(to: 4) }.joined()
                }
            }
            let raw = Array(text.utf8)
            guard Self.kept(raw) else {
                disagreements.append("not kept: \(text)")
                continue
            }
            let (unescaped, canariesKept) = Self.unescaped(raw)
            if unescaped != (try Self.modelText(raw)) || !canariesKept { disagreements.append(text) }
        }
        #expect(disagreements.isEmpty, "the first: \(disagreements.prefix(5))")
    }

    /// Bytes no check would keep (a backslash last, a \u escape cut short, a high surrogate
    /// without its low half, bad hex digits, random bytes full of backslashes): other text, but
    /// never a byte written past the room.
    @Test func bytesTheCheckRefusesStayWithinTheRoom() {
        let odd = [#"\"#, #"abc\"#, #"\u12"#, #"\u"#, #"\ud83d"#, #"\ud83dx\u0041"#, #"\ud83d\u0041"#, #"\uZZZZ"#, #"\x"#, #"\\\"#]
        let alphabet: [UInt8] = Array(#"\ud8DC0a"#.utf8) + [0xC3, 0xA9]
        var state: UInt64 = 7
        func next(_ bound: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((state >> 33) % UInt64(bound))
        }
        var inputs = odd.map { Array($0.utf8) }
        for _ in 0..<20_000 { inputs.append((0..<next(40)).map { _ in alphabet[next(alphabet.count)] }) }
        let spilled = inputs.filter { !Self.unescaped($0).canariesKept }
        #expect(spilled.isEmpty, "the first: \(spilled.prefix(5))")
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}
