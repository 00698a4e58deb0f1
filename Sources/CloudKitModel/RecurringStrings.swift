/// The strings of a page that recur from record to record (the record type, the users and
/// devices of the stamps, the zone), each made once and then shared: a page of 200 records names
/// a handful of them 1,600 times, and each one of 16 bytes or more would otherwise be an
/// allocation, a copy and a release per record. Looked up by their bytes (`SeededByteHash`, open
/// addressing); only plain ASCII text is kept, and no more than `capacity` strings, so that a
/// page of all-different strings costs a lookup each and no memory.
///
/// Its arrays are read for every string of every record: they are exempt from the run-time check
/// of exclusive access, which the class's properties would otherwise pay on each lookup (more
/// instructions than the lookup itself, callgrind), as only the page's reader holds the class,
/// one lookup at a time. Names, hashes and
/// strings are kept apart so that a lookup copies none of them but the string it returns.
final class RecurringStrings {
    @exclusivity(unchecked) private var slots = [Int32](repeating: -1, count: 128)
    @exclusivity(unchecked) private var hashes: [UInt64] = []
    /// Each string's bytes, one after another, and where each one's start.
    @exclusivity(unchecked) private var bytes: [UInt8] = []
    @exclusivity(unchecked) private var starts: [Int] = [0]
    @exclusivity(unchecked) private var strings: [String] = []
    static let capacity = 48
    /// The last `zoneID` object read whole, by its bytes, and the zone it is: every record of a
    /// page names its zone, mostly in the same bytes (`JSONReader.recurringZone`).
    @exclusivity(unchecked) var zone: (json: [UInt8], zone: ZoneID)?
    /// The longest `zoneID` object remembered: a zone's names are short, and a page of long,
    /// all-different ones should not copy each one once more.
    static let longestZone = 256
    /// The stamps of the page's records, by their bytes but for the timestamp's digits.
    @exclusivity(unchecked) var stamps = RecurringStamps()
    /// The members of the page's last record read, in its order (`JSONReader.nextRecordMember`):
    /// the records of a page are written by one server, their members in one order.
    @exclusivity(unchecked) var recordMembers: [RecordMember] = []
    /// The most members remembered: a record has about ten.
    static let recordMembersKept = 32

    private let hash = SeededByteHash()

    /// The string these bytes spell, made the first time.
    func string(for text: UnsafeBufferPointer<UInt8>) -> String {
        let hash = self.hash(text)
        let mask = slots.count - 1
        var slot = Int(truncatingIfNeeded: hash) & mask
        while case let entry = Int(slots[slot]), entry >= 0 {
            if hashes[entry] == hash, starts[entry + 1] - starts[entry] == text.count,
                text.isEmpty
                    || bytes.withUnsafeBufferPointer({ JSONReader.sameBytes($0.baseAddress! + starts[entry], text.baseAddress!, count: text.count) })
            {
                return strings[entry]
            }
            slot = (slot + 1) & mask
        }
        let string = String(decoding: text, as: UTF8.self)
        if strings.count < Self.capacity {
            slots[slot] = Int32(strings.count)
            hashes.append(hash)
            bytes.append(contentsOf: text)
            starts.append(bytes.count)
            strings.append(string)
        }
        return string
    }
}
