import CloudKitModel

/// A record name in a form that is cheap to hash and compare. The generator's names are the
/// upper-case UUID text of 128 bits, so such a name is kept as those bits, and any other name
/// as its text, compared by its bytes as CloudKit tells names apart (`ExactName`: `café` composed
/// and decomposed are two records): two keys are equal exactly when their names are. Finding the live records of a
/// 250,000-record zone hashes every name of its history; hashing and comparing 36 characters
/// (and making them first) cost most of that time.
public enum RecordNameKey: Hashable, Sendable {
    /// An upper-case UUID: its first 16 hexadecimal digits, then its last 16.
    case uuid(UInt64, UInt64)
    case text(ExactName)

    public init(_ name: String) {
        if let (high, low) = RecordNameKey.uuidBits(name) {
            self = .uuid(high, low)
        } else {
            self = .text(ExactName(name))
        }
    }

    /// The bits of `XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX` in upper-case hexadecimal (the
    /// spelling `Hex.uuid` writes); nil for any other text, so that one name has one key.
    static func uuidBits(_ name: String) -> (UInt64, UInt64)? {
        var name = name
        return name.withUTF8 { utf8 -> (UInt64, UInt64)? in
            guard utf8.count == 36 else { return nil }
            var high: UInt64 = 0
            var low: UInt64 = 0
            var digits = 0
            for (i, c) in utf8.enumerated() {
                if i == 8 || i == 13 || i == 18 || i == 23 {
                    guard c == UInt8(ascii: "-") else { return nil }
                    continue
                }
                let value: UInt8
                switch c {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): value = c - UInt8(ascii: "0")
                case UInt8(ascii: "A")...UInt8(ascii: "F"): value = c - UInt8(ascii: "A") + 10
                default: return nil
                }
                if digits < 16 {
                    high = high << 4 | UInt64(value)
                } else {
                    low = low << 4 | UInt64(value)
                }
                digits += 1
            }
            return (high, low)
        }
    }
}
