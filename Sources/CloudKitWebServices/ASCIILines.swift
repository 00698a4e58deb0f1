/// The lines of a text that is all ASCII, as its bytes: what `String.split(whereSeparator:
/// \.isNewline)` and `trimmingCharacters(in:)` give for such text, without a Character or a
/// bridge to Foundation per line. Nil for any other text, which goes their way.
struct ASCIILines {
    let bytes: [UInt8]
    /// Between the newlines, empty ones left out, as `split` leaves them out.
    let lines: [ArraySlice<UInt8>]

    init?(_ text: String) {
        let bytes = Array(text.utf8)
        guard bytes.allSatisfy({ $0 < 0x80 }) else { return nil }
        self.bytes = bytes
        // The ASCII Characters that are newlines: LF, VT, FF, CR; CR LF is one Character, and
        // the empty piece between its two bytes is left out like any empty one.
        lines = bytes.split(whereSeparator: Self.isNewline)
    }

    /// The ASCII bytes that are newlines, and between which the lines are: LF, VT, FF, CR.
    static func isNewline(_ byte: UInt8) -> Bool { (0x0A...0x0D).contains(byte) }

    /// `CharacterSet.whitespacesAndNewlines` within ASCII: tab, LF, VT, FF, CR and space.
    static func isWhitespaceOrNewline(_ byte: UInt8) -> Bool { (0x09...0x0D).contains(byte) || byte == 0x20 }

    /// `CharacterSet.whitespaces` within ASCII: tab and space.
    static func isWhitespace(_ byte: UInt8) -> Bool { byte == 0x09 || byte == 0x20 }

    static func trimming(_ bytes: ArraySlice<UInt8>, _ isTrimmed: (UInt8) -> Bool) -> ArraySlice<UInt8> {
        guard let first = bytes.firstIndex(where: { !isTrimmed($0) }), let last = bytes.lastIndex(where: { !isTrimmed($0) }) else {
            return bytes[bytes.startIndex..<bytes.startIndex]
        }
        return bytes[first...last]
    }

    static func string(_ bytes: ArraySlice<UInt8>) -> String { String(decoding: bytes, as: UTF8.self) }
}
