import Testing

@testable import CloudKitModel

/// `UTF8Check` takes exactly the text the standard library's `String(validating:as:)` takes: at
/// every place in a word, after any run of ASCII, at the end of the bytes, and in text that mixes
/// ASCII with other characters as a note's body does.
struct UTF8CheckTests {
    static func agrees(_ bytes: [UInt8]) -> Bool {
        let checked = bytes.withUnsafeBufferPointer { UTF8Check.isValid($0) }
        return checked == (String(validating: bytes, as: UTF8.self) != nil)
    }

    /// Bytes at the edges of every range the encoding gives a meaning to.
    static let edges: [UInt8] = [
        0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF,
        0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF,
    ]

    /// Every sequence of up to three edge bytes after 0 to 9 ASCII bytes (so that it starts at
    /// each place of an eight-byte word, and in the byte-by-byte tail) and before 0 or 9; every
    /// sequence of four after 5 (the 4-byte characters, and each pair of shorter ones).
    @Test func everySequenceOfEdgeBytesAtEveryPlaceOfAWord() {
        var disagreements: [[UInt8]] = []
        var longest = Self.edges.map { [$0] }
        var sequences = longest
        for _ in 2...4 {
            longest = longest.flatMap { s in Self.edges.map { s + [$0] } }
            sequences += longest
        }
        var bytes: [UInt8] = []
        for sequence in sequences {
            for before in sequence.count < 4 ? [0, 1, 3, 7, 8, 9] : [5] {
                for after in sequence.count < 4 ? [0, 9] : [0] {
                    bytes.removeAll(keepingCapacity: true)
                    bytes.append(contentsOf: repeatElement(UInt8(ascii: "a"), count: before))
                    bytes.append(contentsOf: sequence)
                    bytes.append(contentsOf: repeatElement(UInt8(ascii: "z"), count: after))
                    if !Self.agrees(bytes) { disagreements.append(bytes) }
                }
            }
        }
        #expect(sequences.count == 25 + 625 + 15_625 + 390_625)
        #expect(disagreements.count == 0, "the first: \(disagreements.prefix(5))")
    }

    /// Text of words from every script the bench's notes use, and the same text with one byte
    /// changed at every place: valid and invalid alike, the two agree.
    @Test func mixedTextAndEveryOneByteChangeOfIt() {
        let text = Array("a café, naïve 日本語 メモ in Zürich 😀 crème brûlée, Ελληνικά עברית 한국어 note #42".utf8)
        #expect(Self.agrees(text))
        #expect(text.withUnsafeBufferPointer { UTF8Check.isValid($0) })
        var disagreements: [(Int, UInt8)] = []
        var invalid = 0
        for place in text.indices {
            for byte in Self.edges {
                var changed = text
                changed[place] = byte
                if !Self.agrees(changed) { disagreements.append((place, byte)) }
                if String(validating: changed, as: UTF8.self) == nil { invalid += 1 }
            }
        }
        #expect(invalid > 1_000, "the changes make invalid text as well as valid")
        #expect(disagreements.count == 0, "the first: \(disagreements.prefix(5))")
    }
}
