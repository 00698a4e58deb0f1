/// The record names a zone's batches copied straight into its tables in this run, each with its
/// table, as hashes: while a zone is copied directly, every row of it in every table was written
/// by this run, so a name met under one table that some batch wrote under another is found here,
/// and the batch is merged instead, where the row of the record's old type is deleted (CloudKit
/// lets a deleted record's name be taken by a record of another type, and a feed may report only
/// the new record).
///
/// A slot holds a name's hash in its high 48 bits and its table's index + 1 in the low 16; 0 is
/// empty. Two names with one hash in two tables send the zone to merging, which is right for any
/// batch; one name always has one hash. Eight bytes a slot, at most three quarters full (11 to
/// 21 bytes a name), where a `Set<String>` of a backfill's names would hold each name's bytes
/// too.
struct DirectNames {
    private var slots = [UInt64](repeating: 0, count: 1024)
    private(set) var count = 0

    /// A name's entry: its hash and the index of its table.
    static func entry(hash: UInt64, table: Int) -> UInt64 {
        max(hash & ~0xFFFF, 0x1_0000) | UInt64(table + 1)
    }

    /// Adds a batch's entries; the index of a table whose entry named a record that another
    /// table's entry named before, or nil when each name stays in its table.
    mutating func add(_ entries: [UInt64]) -> Int? {
        for entry in entries {
            if (count + 1) * 4 > slots.count * 3 { grow() }
            let mask = slots.count - 1
            let key = entry & ~0xFFFF
            var i = Int(truncatingIfNeeded: key >> 16) & mask
            while slots[i] != 0, slots[i] & ~0xFFFF != key { i = (i + 1) & mask }
            if slots[i] == 0 {
                slots[i] = entry
                count += 1
            } else if slots[i] != entry {
                return Int(entry & 0xFFFF) - 1
            }
        }
        return nil
    }

    private mutating func grow() {
        let old = slots
        slots = [UInt64](repeating: 0, count: old.count * 2)
        let mask = slots.count - 1
        for entry in old where entry != 0 {
            var i = Int(truncatingIfNeeded: entry >> 16) & mask
            while slots[i] != 0 { i = (i + 1) & mask }
            slots[i] = entry
        }
    }
}
