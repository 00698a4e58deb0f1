/// A page's `created` and `modified` stamps by their bytes before and after the timestamp's
/// number (`{"timestamp":` and `,"userRecordName":"_u","deviceID":"D"}`, in whatever order the
/// members come), with the user and device they name: a page's stamps differ in their
/// timestamps and name a few users and devices (`JSONReader.recurringStamp`).
///
/// Found by a seeded hash of both parts, for each of the few pairs of lengths the stamps kept
/// have (the same members give the same lengths), then compared byte for byte: a stamp costs a
/// lookup for each pair of lengths, however many stamps are kept. (A search through them one by
/// one measured the same on the bench's pages, 18 stamps, and grows with them.)
struct RecurringStamps {
    struct Stamp {
        var before: Range<Int>
        var after: Range<Int>
        var key: UInt64
        var user: String?
        var device: String?
    }

    /// The lengths before and after the number of the stamps kept.
    private(set) var shapes: [(before: Int, after: Int)] = []
    private var stamps: [Stamp] = []
    /// Each stamp's bytes, one after another.
    private var bytes: [UInt8] = []
    private var slots = [Int32](repeating: -1, count: 64)
    private let hash = SeededByteHash()

    /// At most half the slots, and a few lengths to try: a page of all-different stamps costs a
    /// lookup of each and little memory.
    static let capacity = 32
    static let shapesKept = 4
    /// The longest stamp kept, both parts together.
    static let longest = 192

    func find(before: UnsafeBufferPointer<UInt8>, after: UnsafeBufferPointer<UInt8>) -> Stamp? {
        let key = self.key(before, after)
        var slot = Int(truncatingIfNeeded: key) & (slots.count - 1)
        while case let entry = Int(slots[slot]), entry >= 0 {
            let stamp = stamps[entry]
            if stamp.key == key, stamp.before.count == before.count, stamp.after.count == after.count,
                same(stamp.before, before), same(stamp.after, after)
            {
                return stamp
            }
            slot = (slot + 1) & (slots.count - 1)
        }
        return nil
    }

    mutating func remember(before: UnsafeBufferPointer<UInt8>, after: UnsafeBufferPointer<UInt8>, user: String?, device: String?) {
        guard stamps.count < Self.capacity, before.count + after.count <= Self.longest, !before.isEmpty, !after.isEmpty,
            find(before: before, after: after) == nil
        else { return }
        if !shapes.contains(where: { $0.before == before.count && $0.after == after.count }) {
            guard shapes.count < Self.shapesKept else { return }
            shapes.append((before.count, after.count))
        }
        let key = self.key(before, after)
        var slot = Int(truncatingIfNeeded: key) & (slots.count - 1)
        while slots[slot] >= 0 { slot = (slot + 1) & (slots.count - 1) }
        slots[slot] = Int32(stamps.count)
        let start = bytes.count
        bytes.append(contentsOf: before)
        bytes.append(contentsOf: after)
        stamps.append(Stamp(before: start..<start + before.count, after: start + before.count..<bytes.count, key: key, user: user, device: device))
    }

    private func key(_ before: UnsafeBufferPointer<UInt8>, _ after: UnsafeBufferPointer<UInt8>) -> UInt64 {
        hash(before) ^ (hash(after) &* 0x9E37_79B9_7F4A_7C15)
    }

    private func same(_ kept: Range<Int>, _ text: UnsafeBufferPointer<UInt8>) -> Bool {
        bytes.withUnsafeBufferPointer { JSONReader.sameBytes($0.baseAddress! + kept.lowerBound, text.baseAddress!, count: text.count) }
    }
}
