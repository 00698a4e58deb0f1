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
        bytes.withUnsafeBytes { encode($0, appendingTo: &out) }
        return String(decoding: out, as: UTF8.self)
    }

    /// Appends the base64 of `bytes` to `out`, in room made once.
    public static func encode(_ bytes: UnsafeRawBufferPointer, appendingTo out: inout [UInt8]) {
        let count = encodedCount(bytes.count)
        guard count > 0 else { return }
        out.append(addingCapacity: count) { span in
            span.withUnsafeMutableBufferPointer { buffer, initialized in
                encode(bytes, at: buffer.baseAddress!)
                initialized = count
            }
        }
    }

    /// How many bytes the base64 of `count` bytes takes.
    package static func encodedCount(_ count: Int) -> Int { (count + 2) / 3 * 4 }

    /// Writes the base64 of `bytes` at `out`, which has room for `encodedCount(bytes.count)`.
    package static func encode(_ bytes: UnsafeRawBufferPointer, at out: UnsafeMutablePointer<UInt8>) {
        alphabet.withUnsafeBufferPointer { alphabet in
            var o = 0
            func put(_ n: UInt32, _ characters: Int) {
                for k in 0..<4 {
                    out[o + k] = k < characters ? alphabet[Int(n >> UInt32(18 - 6 * k) & 63)] : UInt8(ascii: "=")
                }
                o += 4
            }
            var i = 0
            while i + 2 < bytes.count {
                put(UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2]), 4)
                i += 3
            }
            switch bytes.count - i {
            case 1: put(UInt32(bytes[i]) << 16, 2)
            case 2: put(UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8, 3)
            default: break
            }
        }
    }

    /// The bytes, or nil when the text is not standard base64 as RFC 4648 writes it: only the
    /// standard alphabet (a URL-safe `-` or `_` is refused, not guessed at), a length that is a
    /// multiple of four with `=` padding, and zero bits where the padding leaves some.
    public static func decode(_ text: String) -> [UInt8]? {
        var text = text
        return text.withUTF8 { utf8 -> [UInt8]? in
            var out = [UInt8](repeating: 0, count: maxDecodedCount(utf8.count))
            guard let written = out.withUnsafeMutableBufferPointer({ decode(utf8, into: $0) }) else { return nil }
            out.removeSubrange(written...)
            return out
        }
    }

    /// The most bytes `text.count` characters decode to.
    public static func maxDecodedCount(_ textCount: Int) -> Int { textCount / 4 * 3 }

    /// Decodes `text` into `out`, which has room for `maxDecodedCount(text.count)` bytes: how
    /// many it wrote, or nil when it is not base64 as `decode` takes it. Four characters at a
    /// time, written to memory made room for once: a `bytea` field of every record goes this way.
    public static func decode(_ text: UnsafeBufferPointer<UInt8>, into out: UnsafeMutableBufferPointer<UInt8>) -> Int? {
        guard text.count % 4 == 0, out.count >= maxDecodedCount(text.count) else { return nil }
        var end = text.count
        while end > 0 && text[end - 1] == UInt8(ascii: "=") { end -= 1 }
        if text.count - end > 2 { return nil }
        return reverse.withUnsafeBufferPointer { reverse -> Int? in
            var written = 0
            var i = 0
            // Whole groups of four, none of them padding.
            while i + 4 <= end {
                let a = UInt32(reverse[Int(text[i])])
                let b = UInt32(reverse[Int(text[i + 1])])
                let c = UInt32(reverse[Int(text[i + 2])])
                let d = UInt32(reverse[Int(text[i + 3])])
                // 0xFF marks a character outside the alphabet; any one sets a high bit here.
                if (a | b | c | d) & 0x80 != 0 { return nil }
                let n = a << 18 | b << 12 | c << 6 | d
                out[written] = UInt8(truncatingIfNeeded: n >> 16)
                out[written + 1] = UInt8(truncatingIfNeeded: n >> 8)
                out[written + 2] = UInt8(truncatingIfNeeded: n)
                written += 3
                i += 4
            }
            // The last two or three characters before the padding.
            var accumulator: UInt32 = 0
            var bits = 0
            while i < end {
                let v = reverse[Int(text[i])]
                if v == 0xFF { return nil }
                accumulator = accumulator << 6 | UInt32(v)
                bits += 6
                if bits >= 8 {
                    bits -= 8
                    out[written] = UInt8(truncatingIfNeeded: accumulator >> UInt32(bits))
                    written += 1
                }
                i += 1
            }
            // The bits the padding leaves over belong to no byte: another writer's garbage.
            return accumulator & ((1 << UInt32(bits)) - 1) == 0 ? written : nil
        }
    }
}
