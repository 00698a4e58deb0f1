import CloudKitModel

/// Field names looked up by their UTF-8 bytes as they stand in a page, so that a record's fields
/// are sorted into columns without making a String of each name, or hashing it with SipHash.
/// Open addressing with linear probing over a seeded hash of the name's words
/// (`SeededByteHash`); names are short and few.
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
    /// Drawn once per table (`SeededByteHash`).
    let hash = SeededByteHash()
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
}
