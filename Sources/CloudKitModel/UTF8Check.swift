/// UTF-8 as RFC 3629 defines it: no overlong forms, no surrogates, nothing past U+10FFFF. The
/// same text `String(validating:as:)` accepts, without the generic metadata it looks up on every
/// call (measured at 4% of a run, see `JSONReader.text`).
enum UTF8Check {
    static func isValid(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        var i = 0
        let n = bytes.count
        guard let base = bytes.baseAddress else { return true }
        while i < n {
            // ASCII between the other characters, eight bytes at a time, and the ASCII bytes
            // before the first other one of a word at once: text that mixes the two (crème
            // brûlée) took a look at a word and a byte's test for each ASCII byte between two
            // others (callgrind, `Benchmarks/`).
            if i + 8 <= n {
                let high = UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self) & 0x8080_8080_8080_8080
                if high == 0 {
                    i += 8
                    continue
                }
                i += high.trailingZeroBitCount &>> 3
            }
            let b0 = bytes[i]
            if b0 < 0x80 {
                i += 1
                continue
            }
            let length: Int
            var low: UInt8 = 0x80
            var high: UInt8 = 0xBF
            switch b0 {
            case 0xC2...0xDF: length = 2
            case 0xE0:
                length = 3
                low = 0xA0
            case 0xE1...0xEC, 0xEE...0xEF: length = 3
            case 0xED:
                length = 3
                high = 0x9F
            case 0xF0:
                length = 4
                low = 0x90
            case 0xF1...0xF3: length = 4
            case 0xF4:
                length = 4
                high = 0x8F
            default: return false
            }
            guard i + length <= n else { return false }
            let b1 = bytes[i + 1]
            guard b1 >= low, b1 <= high else { return false }
            for k in 2..<max(2, length) where bytes[i + k] & 0xC0 != 0x80 { return false }
            i += length
        }
        return true
    }
}
