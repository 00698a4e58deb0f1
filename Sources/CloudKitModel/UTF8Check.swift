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
            let b0 = base[i]
            if b0 < 0x80 {
                i += 1
                continue
            }
            // Each length by its own test, the commonest first (two bytes: accents, Greek, Hebrew;
            // three: CJK, Hangul), with its continuation bytes checked at once: a switch over the
            // lead byte and a loop over the rest took 30% more instructions (callgrind: 2,477 a
            // bench record against 1,906).
            if b0 &- 0xC2 < 0x1E {  // C2 to DF
                guard i + 1 < n, base[i + 1] & 0xC0 == 0x80 else { return false }
                i += 2
                continue
            }
            if b0 & 0xF0 == 0xE0 {
                guard i + 2 < n else { return false }
                // After E0, A0 to BF (no overlong form); after ED, 80 to 9F (no surrogate).
                let b1 = base[i + 1]
                let low: UInt8 = b0 == 0xE0 ? 0xA0 : 0x80
                let high: UInt8 = b0 == 0xED ? 0x9F : 0xBF
                guard b1 >= low, b1 <= high, base[i + 2] & 0xC0 == 0x80 else { return false }
                i += 3
                continue
            }
            // F0 to F4; after F0, 90 to BF (no overlong form); after F4, 80 to 8F (to U+10FFFF).
            // Any other lead byte (80 to C1, F5 to FF) starts no character.
            guard b0 &- 0xF0 < 5, i + 3 < n else { return false }
            let b1 = base[i + 1]
            let low: UInt8 = b0 == 0xF0 ? 0x90 : 0x80
            let high: UInt8 = b0 == 0xF4 ? 0x8F : 0xBF
            guard b1 >= low, b1 <= high, base[i + 2] & 0xC0 == 0x80, base[i + 3] & 0xC0 == 0x80 else { return false }
            i += 4
        }
        return true
    }
}
