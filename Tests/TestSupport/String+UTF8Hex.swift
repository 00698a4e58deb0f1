import Foundation

extension String {
    /// The text's UTF-8 bytes in hexadecimal, as PostgreSQL's `encode(convert_to(t, 'UTF8'),
    /// 'hex')` gives them: names compared so are compared by their bytes, where two spellings of
    /// one String (`café` composed and decomposed) are equal to Swift.
    public var utf8Hex: String { utf8.map { String(format: "%02x", $0) }.joined() }
}
