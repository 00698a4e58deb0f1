#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The strings of a page that recur from record to record (the record type, the users and
/// devices of the stamps, the zone), each made once and then shared: a page of 200 records names
/// a handful of them 1,600 times, and each one of 16 bytes or more would otherwise be an
/// allocation, a copy and a release per record. Looked up by their bytes (FNV-1a, open
/// addressing); only plain ASCII text is kept, and no more than `capacity` strings, so that a
/// page of all-different strings costs a lookup each and no memory.
final class RecurringStrings {
    /// Where the check of a record's fields gathers them before they are copied out at their
    /// count: one allocation a record, where growing an array field by field took five.
    var fieldsRead: [RawField] = []
    private var slots = [Int32](repeating: -1, count: 128)
    private var entries: [(hash: UInt64, bytes: [UInt8], string: String)] = []
    static let capacity = 48

    /// The string these bytes spell, made the first time.
    func string(for bytes: UnsafeBufferPointer<UInt8>) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        let mask = slots.count - 1
        var slot = Int(truncatingIfNeeded: hash) & mask
        while slots[slot] >= 0 {
            let entry = entries[Int(slots[slot])]
            if entry.hash == hash, entry.bytes.count == bytes.count,
                bytes.isEmpty || entry.bytes.withUnsafeBufferPointer({ memcmp($0.baseAddress!, bytes.baseAddress!, bytes.count) == 0 })
            {
                return entry.string
            }
            slot = (slot + 1) & mask
        }
        let string = String(decoding: bytes, as: UTF8.self)
        if entries.count < Self.capacity {
            slots[slot] = Int32(entries.count)
            entries.append((hash, Array(bytes), string))
        }
        return string
    }
}
