/// Text from outside (a server's reason, a zone or record type name, an error kept in the
/// database, a value in a pipeline file) made inert before it reaches a terminal or a text log:
/// a control character in it could otherwise clear the screen, retitle the terminal, move the
/// cursor, or end a log line and forge the next one.
///
/// Every C0 control (U+0000-U+001F, newline and tab included), DEL (U+007F) and every C1 control
/// (U+0080-U+009F, where `\u{9b}` is a one-character CSI to many terminals) is written as Swift
/// writes it in a string literal, `\u{1b}`; everything else is kept, non-ASCII text included.
/// Our own multi-line output escapes each value, or each of its own lines, so that its own
/// newlines stay newlines. The JSON log format needs none of this: JSON escapes control characters.
public enum InertText {
    /// `text` with its control characters escaped; the same string when it has none.
    public static func escaped(_ text: some StringProtocol) -> String {
        guard text.unicodeScalars.contains(where: isControl) else { return String(text) }
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            if isControl(scalar) {
                out.append(contentsOf: "\\u{\(String(scalar.value, radix: 16))}".unicodeScalars)
            } else {
                out.append(scalar)
            }
        }
        return String(out)
    }

    /// How many characters of a value a diagnostic quotes: any PostgreSQL name (63 bytes) whole,
    /// enough of anything else to recognise it, never a flood.
    public static let quotedLength = 80

    /// A value as a sentence quotes it: `'bigin'`, escaped, and cut after `quotedLength`
    /// characters with its whole length said (`'xxxx…' (104,857,600 characters)`), so that a
    /// 100 MB value makes a line, not 100 MB of output.
    public static func quoted(_ text: some StringProtocol) -> String {
        let text = String(text)
        var count = 0
        var end = text.unicodeScalars.startIndex
        while end < text.unicodeScalars.endIndex, count < quotedLength {
            text.unicodeScalars.formIndex(after: &end)
            count += 1
        }
        guard end < text.unicodeScalars.endIndex else { return "'\(escaped(text))'" }
        let total = text.unicodeScalars.count
        return "'\(escaped(String(text.unicodeScalars[..<end])))…' (\(total.grouped) characters)"
    }

    /// `text` cut to `limit` characters, saying so: the last guard of a line built from outside
    /// text, after the values in it were quoted.
    public static func capped(_ text: String, limit: Int) -> String {
        let scalars = text.unicodeScalars
        guard scalars.count > limit else { return text }
        let end = scalars.index(scalars.startIndex, offsetBy: limit)
        return String(scalars[..<end]) + "… (cut at \(limit.grouped) characters)"
    }

    static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }
}
