#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Field names looked up by their UTF-8 bytes as they stand in a page, so that a record's fields
/// are sorted into columns without making a String of each name, or hashing it with SipHash.
/// Open addressing with linear probing over FNV-1a hashes; names are short and few.
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
        let hash = Self.hash(name)
        let mask = slots.count - 1
        var slot = Int(truncatingIfNeeded: hash) & mask
        while true {
            let e = slots[slot]
            if e < 0 { return nil }
            let entry = entries[Int(e)]
            if entry.hash == hash, entry.count == name.count,
                name.count == 0 || names.withUnsafeBufferPointer({ Self.same(name, $0.baseAddress! + entry.start) })
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
        let hash = names.withUnsafeBufferPointer { Self.hash(UnsafeBufferPointer(rebasing: $0[start...])) }
        entries.append(Entry(hash: hash, start: start, count: names.count - start, value: value))
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

    /// Whether the bytes at `other` are `name`'s: eight bytes at a time, the last eight (or four)
    /// overlapping the ones before. A call of `memcmp` for a name of a few bytes cost more than
    /// the bytes (0.6% of a run over HTTP, perf).
    @inline(__always) static func same(_ name: UnsafeBufferPointer<UInt8>, _ other: UnsafePointer<UInt8>) -> Bool {
        let a = UnsafeRawPointer(name.baseAddress!)
        let b = UnsafeRawPointer(other)
        let count = name.count
        guard count >= 4 else { return (0..<count).allSatisfy { name[$0] == other[$0] } }
        guard count >= 8 else {
            return a.loadUnaligned(as: UInt32.self) == b.loadUnaligned(as: UInt32.self)
                && a.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self) == b.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self)
        }
        var at = 0
        while at + 8 < count {
            guard a.loadUnaligned(fromByteOffset: at, as: UInt64.self) == b.loadUnaligned(fromByteOffset: at, as: UInt64.self) else { return false }
            at += 8
        }
        return a.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self) == b.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self)
    }

    @inline(__always) static func hash(_ bytes: UnsafeBufferPointer<UInt8>) -> UInt64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in bytes { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 }
        return h
    }
}
