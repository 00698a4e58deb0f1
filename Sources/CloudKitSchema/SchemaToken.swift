/// One token of the CloudKit Schema Language: a name (a keyword is an unquoted name), or one of
/// the punctuation marks `( ) , ; < >`.
struct SchemaToken: Sendable, Hashable {
    enum Kind: Sendable, Hashable {
        case name(String, quoted: Bool)
        case punctuation(Character)
        case end
    }

    var kind: Kind
    var position: SchemaPosition

    /// An unquoted name equal to `keyword`, ignoring case (`record type` reads as `RECORD TYPE`).
    func isKeyword(_ keyword: String) -> Bool {
        if case .name(let text, quoted: false) = kind { return text.uppercased() == keyword }
        return false
    }

    func isPunctuation(_ mark: Character) -> Bool { kind == .punctuation(mark) }

    /// How the token reads in an error: `'title'`, `'('`, `the end of the file`.
    var quoted: String {
        switch kind {
        case .name(let text, quoted: true): return "'\"\(text)\"'"
        case .name(let text, quoted: false): return "'\(text)'"
        case .punctuation(let mark): return "'\(mark)'"
        case .end: return "the end of the file"
        }
    }
}
