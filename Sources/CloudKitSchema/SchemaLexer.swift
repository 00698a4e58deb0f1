/// Splits `.ckdb` text into tokens, skipping white space and the three comment styles (`//` and
/// `--` to the end of the line, `/* … */`).
struct SchemaLexer {
    private let scalars: [Unicode.Scalar]
    private var index = 0
    private var line = 1
    private var column = 1

    init(_ text: String) { scalars = Array(text.unicodeScalars) }

    private var position: SchemaPosition { SchemaPosition(line: line, column: column) }

    private func peek(_ offset: Int = 0) -> Unicode.Scalar? { index + offset < scalars.count ? scalars[index + offset] : nil }

    private mutating func advance() {
        if scalars[index] == "\n" {
            line += 1
            column = 1
        } else {
            column += 1
        }
        index += 1
    }

    mutating func tokens() throws(SchemaSyntaxError) -> [SchemaToken] {
        var out: [SchemaToken] = []
        while true {
            try skipSpaceAndComments()
            let start = position
            guard let c = peek() else {
                out.append(SchemaToken(kind: .end, position: start))
                return out
            }
            switch c {
            case "(", ")", ",", ";", "<", ">":
                advance()
                out.append(SchemaToken(kind: .punctuation(Character(c)), position: start))
            case "\"":
                out.append(SchemaToken(kind: .name(try quotedName(), quoted: true), position: start))
            case _ where Self.isLetter(c):
                var name = ""
                while let n = peek(), Self.isLetter(n) || Self.isDigit(n) || n == "_" {
                    name.unicodeScalars.append(n)
                    advance()
                }
                out.append(SchemaToken(kind: .name(name, quoted: false), position: start))
            case _ where Self.isDigit(c) || c == "_":
                throw SchemaSyntaxError("a name must start with a letter; quote it (\"…\") to start it otherwise", at: start)
            default:
                throw SchemaSyntaxError("unexpected character '\(c)'", at: start)
            }
        }
    }

    private mutating func skipSpaceAndComments() throws(SchemaSyntaxError) {
        while let c = peek() {
            if c == " " || c == "\t" || c == "\n" || c == "\r" {
                advance()
            } else if (c == "/" && peek(1) == "/") || (c == "-" && peek(1) == "-") {
                while let n = peek(), n != "\n" { advance() }
            } else if c == "/" && peek(1) == "*" {
                let start = position
                advance()
                advance()
                while !(peek() == "*" && peek(1) == "/") {
                    guard peek() != nil else { throw SchemaSyntaxError("this /* comment is never closed with */", at: start) }
                    advance()
                }
                advance()
                advance()
            } else {
                return
            }
        }
    }

    /// `"name"`; a doubled quote inside stands for one.
    private mutating func quotedName() throws(SchemaSyntaxError) -> String {
        let start = position
        advance()
        var name = ""
        while true {
            guard let c = peek(), c != "\n" else { throw SchemaSyntaxError("this quoted name is not closed on its line", at: start) }
            // A name becomes a PostgreSQL identifier, which cannot hold a NUL; no export writes
            // control characters in a name, and one would reach terminals in validate's plan. A
            // tab too: a pipeline file refuses a column named with one, so the mapping printed
            // from this file could not be pasted into one.
            if c.value < 0x20 || (0x7F...0x9F).contains(c.value) {
                throw SchemaSyntaxError("a quoted name holds a control character (U+\(String(c.value, radix: 16, uppercase: true)))", at: position)
            }
            advance()
            if c == "\"" {
                guard peek() == "\"" else { break }
                advance()
            }
            name.unicodeScalars.append(c)
        }
        guard !name.isEmpty else { throw SchemaSyntaxError("a quoted name is empty", at: start) }
        return name
    }

    private static func isLetter(_ c: Unicode.Scalar) -> Bool { ("a"..."z").contains(c) || ("A"..."Z").contains(c) }
    private static func isDigit(_ c: Unicode.Scalar) -> Bool { ("0"..."9").contains(c) }
}
