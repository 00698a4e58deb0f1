/// Standard base64 (RFC 4648, with padding), as CloudKit uses for BYTES values: the one base64 of
/// zonefeed, and a strict one. Decoding is done for every `bytea` value of a backfill, so it
/// avoids Foundation's `Data` round trip (hand-written for that, and kept so).
public enum Base64 {
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    static let reverse: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (i, c) in alphabet.enumerated() { table[Int(c)] = UInt8(i) }
        return table
    }()

    public static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var i = 0
        while i + 2 < bytes.count {
            let n = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2])
            out.append(alphabet[Int(n >> 18)])
            out.append(alphabet[Int(n >> 12 & 63)])
            out.append(alphabet[Int(n >> 6 & 63)])
            out.append(alphabet[Int(n & 63)])
            i += 3
        }
        let rest = bytes.count - i
        if rest == 1 {
            let n = UInt32(bytes[i]) << 16
            out += [alphabet[Int(n >> 18)], alphabet[Int(n >> 12 & 63)], UInt8(ascii: "="), UInt8(ascii: "=")]
        } else if rest == 2 {
            let n = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8
            out += [alphabet[Int(n >> 18)], alphabet[Int(n >> 12 & 63)], alphabet[Int(n >> 6 & 63)], UInt8(ascii: "=")]
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes, or nil when the text is not standard base64 as RFC 4648 writes it: only the
    /// standard alphabet (a URL-safe `-` or `_` is refused, not guessed at), a length that is a
    /// multiple of four with `=` padding, and zero bits where the padding leaves some.
    public static func decode(_ text: String) -> [UInt8]? {
        var text = text
        return text.withUTF8 { utf8 -> [UInt8]? in
            var out: [UInt8] = []
            out.reserveCapacity(utf8.count * 3 / 4)
            return decode(utf8, appendingTo: &out) ? out : nil
        }
    }

    /// Decodes `text` onto the end of `out`; false (with `out` holding whatever was decoded)
    /// when it is not base64 as `decode` takes it.
    public static func decode(_ text: UnsafeBufferPointer<UInt8>, appendingTo out: inout [UInt8]) -> Bool {
        guard text.count % 4 == 0 else { return false }
        var end = text.count
        while end > 0 && text[end - 1] == UInt8(ascii: "=") { end -= 1 }
        if text.count - end > 2 { return false }
        var accumulator: UInt32 = 0
        var bits = 0
        for i in 0..<end {
            let v = reverse[Int(text[i])]
            if v == 0xFF { return false }
            accumulator = accumulator << 6 | UInt32(v)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
            }
        }
        // The bits the padding leaves over belong to no byte: another writer's garbage.
        return accumulator & ((1 << UInt32(bits)) - 1) == 0
    }
}
