import CloudKitModel

/// Field names looked up by their UTF-8 bytes as they stand in a page, so that a record's fields
/// are sorted into columns without making a String of each name, or hashing it with SipHash.
/// Open addressing with linear probing over a seeded hash of the name's words; names are short
/// and few.
///
/// Hand-written because a `[String: Int]` lookup needs the String first: making and dropping it
/// was a malloc, a free, a retain and a release per field.
struct FieldNameTable {
    private struct Entry {
        var hash: UInt64
        var start: Int
        var count: Int
        var value: Int
    }

    private var slots: [Int32]
    private var entries: [Entry] = []
    private var names: [UInt8] = []
    /// Past this many names, nothing more is learned: a server that sends a new name in every
    /// record cannot grow the table for ever.
    static let capacity = 4_096

    init() {
        slots = Array(repeating: -1, count: 64)
    }

    var count: Int { entries.count }

    func value(for name: UnsafeBufferPointer<UInt8>) -> Int? {
        let code = hash(name)
        let mask = slots.count - 1
        var slot = Int(truncatingIfNeeded: code) & mask
        while true {
            let e = slots[slot]
            if e < 0 { return nil }
            let entry = entries[Int(e)]
            if entry.hash == code, entry.count == name.count,
                name.count == 0 || names.withUnsafeBufferPointer({ JSONReader.sameBytes(name.baseAddress!, $0.baseAddress! + entry.start, count: name.count) })
            {
                return entry.value
            }
            slot = (slot + 1) & mask
        }
    }

    /// Adds a name that is not there yet; past `capacity`, does nothing.
    mutating func insert(_ name: some Collection<UInt8>, value: Int) {
        guard entries.count < Self.capacity else { return }
        let start = names.count
        names.append(contentsOf: name)
        let code = names.withUnsafeBufferPointer { hash(UnsafeBufferPointer(rebasing: $0[start...])) }
        entries.append(Entry(hash: code, start: start, count: names.count - start, value: value))
        if entries.count * 2 > slots.count {
            slots = Array(repeating: -1, count: slots.count * 2)
            for i in entries.indices { place(Int32(i)) }
        } else {
            place(Int32(entries.count - 1))
        }
    }

    private mutating func place(_ index: Int32) {
        let mask = slots.count - 1
        var slot = Int(truncatingIfNeeded: entries[Int(index)].hash) & mask
        while slots[slot] >= 0 { slot = (slot + 1) & mask }
        slots[slot] = index
    }

    /// Drawn once per table: which names share a slot is not the same from one process to the
    /// next, so a server cannot choose field names that all land in one.
    private let seed = UInt64.random(in: .min ... .max)

    /// The name's bytes read eight at a time, the last word overlapping the one before rather
    /// than reading past the name (four and four for 4 to 7 bytes, three bytes for fewer), each
    /// word folded in with one wide multiply. FNV-1a's byte-at-a-time loop, a multiply per byte
    /// in one chain, was two thirds of this lookup (perf annotate), and the lookup 2.8% of a run
    /// over HTTP.
    @inline(__always) func hash(_ bytes: UnsafeBufferPointer<UInt8>) -> UInt64 {
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

    /// The wide product's high half folded into its low one, so that the slot (the low bits)
    /// depends on every bit of the word.
    @inline(__always) static func mix(_ x: UInt64) -> UInt64 {
        let product = (x ^ 0xA076_1D64_78BD_642F).multipliedFullWidth(by: 0xE703_7ED1_A0B4_28DB)
        return product.high ^ product.low
    }
}
