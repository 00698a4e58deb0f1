/// A hash of a few bytes as they stand in a page (a field name, a user's name), from a seed its
/// owner draws once: which names share a slot of a table is not the same from one process to
/// the next, so a server cannot choose names that all land in one.
///
/// The bytes are read eight at a time, the last word overlapping the one before rather than
/// reading past them (four and four for 4 to 7 bytes, three bytes for fewer), each word folded
/// in with one wide multiply. FNV-1a's byte-at-a-time loop, a multiply per byte in one chain,
/// was two thirds of a field name's lookup (perf annotate), and the lookup 2.8% of a run over
/// HTTP.
public struct SeededByteHash: Sendable {
    @usableFromInline let seed: UInt64

    public init(seed: UInt64 = .random(in: .min ... .max)) {
        self.seed = seed
    }

    @inlinable @inline(__always) public func callAsFunction(_ bytes: UnsafeBufferPointer<UInt8>) -> UInt64 {
        let n = bytes.count
        var h = seed ^ UInt64(truncatingIfNeeded: n)
        guard let p = bytes.baseAddress, n > 0 else { return Self.mix(h) }
        let raw = UnsafeRawPointer(p)
        if n >= 8 {
            var i = 0
            while i + 8 < n {
                h = Self.mix(h ^ raw.loadUnaligned(fromByteOffset: i, as: UInt64.self))
                i += 8
            }
            h = Self.mix(h ^ raw.loadUnaligned(fromByteOffset: n - 8, as: UInt64.self))
        } else if n >= 4 {
            let first = UInt64(raw.loadUnaligned(as: UInt32.self))
            let last = UInt64(raw.loadUnaligned(fromByteOffset: n - 4, as: UInt32.self))
            h = Self.mix(h ^ (first << 32 | last))
        } else {
            h = Self.mix(h ^ (UInt64(p[0]) << 16 | UInt64(p[n / 2]) << 8 | UInt64(p[n - 1])))
        }
        return h
    }

    /// The wide product's high half folded into its low one, so that a slot (the low bits)
    /// depends on every bit of the word.
    @inlinable @inline(__always) static func mix(_ x: UInt64) -> UInt64 {
        let product = (x ^ 0xA076_1D64_78BD_642F).multipliedFullWidth(by: 0xE703_7ED1_A0B4_28DB)
        return product.high ^ product.low
    }
}
