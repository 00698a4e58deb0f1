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
        /// The entry of the name that followed this one in the last record where it was not
        /// the last or followed by a name missing from the record before; -1: none yet.
        var next: Int32 = -1
    }

    private var slots: [Int32]
    private var entries: [Entry] = []
    private var names: [UInt8] = []
    /// The entry of the first name of the last record whose first name was looked for by
    /// hash; -1: none yet.
    private var first: Int32 = -1
    /// Drawn once per table (`SeededByteHash`).
    let hash = SeededByteHash()
    /// Past this many names, nothing more is learned: a server that sends a new name in every
    /// record cannot grow the table for ever.
    static let capacity = 4_096

    init() {
        slots = Array(repeating: -1, count: 64)
    }

    var count: Int { entries.count }

    /// Where a record's names are: at its start (-1), after the entry of the name looked up
    /// last, or lost (-2) after a name the table does not have, where nothing is predicted.
    struct Cursor {
        fileprivate var entry: Int32 = -1
    }

    /// The value of a record's next name, after the one at `cursor`. A server writes the fields
    /// of one record type in one order, some left out now and then: the name is looked for first
    /// where it followed the name before it last time, or one further on, each by one compare of
    /// its bytes, and only another name by its hash: 99% of the bench's names are found so.
    /// (The micro-benchmark, `Benchmarks/`: 42,491 → 42,231 instructions a record; looking up by
    /// the name's place in the record instead missed after each field left out, 42,795.)
    mutating func value(for name: UnsafeBufferPointer<UInt8>, after cursor: inout Cursor) -> Int? {
        let predicted = cursor.entry == -1 ? first : cursor.entry >= 0 ? entries[Int(cursor.entry)].next : -1
        if predicted >= 0 {
            if isName(name, of: predicted) {
                cursor.entry = predicted
                return entries[Int(predicted)].value
            }
            let further = entries[Int(predicted)].next
            if further >= 0, isName(name, of: further) {
                cursor.entry = further
                return entries[Int(further)].value
            }
        }
        guard let found = index(of: name) else {
            cursor.entry = -2
            return nil
        }
        if cursor.entry == -1 {
            first = found
        } else if cursor.entry >= 0 {
            entries[Int(cursor.entry)].next = found
        }
        cursor.entry = found
        return entries[Int(found)].value
    }

    @inline(__always) private func isName(_ name: UnsafeBufferPointer<UInt8>, of index: Int32) -> Bool {
        let entry = entries[Int(index)]
        return entry.count == name.count
            && (name.count == 0 || names.withUnsafeBufferPointer { JSONReader.sameBytes(name.baseAddress!, $0.baseAddress! + entry.start, count: name.count) })
    }

    /// The value of a name, by its hash alone.
    func value(for name: UnsafeBufferPointer<UInt8>) -> Int? {
        index(of: name).map { entries[Int($0)].value }
    }

    /// The entry of a name, by its hash; nil when the table does not have it.
    private func index(of name: UnsafeBufferPointer<UInt8>) -> Int32? {
        let code = hash(name)
        let mask = slots.count - 1
        var slot = Int(truncatingIfNeeded: code) & mask
        while true {
            let e = slots[slot]
            if e < 0 { return nil }
            if entries[Int(e)].hash == code, isName(name, of: e) { return e }
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
