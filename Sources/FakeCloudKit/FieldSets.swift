import CloudKitModel
import Synchronization

/// The field sets notes take their fields from when `FakeSettings.fieldSets` is set: a zone's
/// set is drawn by `FakeFeed.noteFields` from its own random sequence, the same for every sink,
/// and written as CloudKit's JSON once, with its notes (`JSONFields`), the first time a page
/// needs it. A page then copies the set's bytes and moves its notes to where they land, where
/// drawing and writing a note's fields took about 12,000 instructions (`Benchmarks/run`).
///
/// Sets are kept for the last `zonesKept` zones asked for, so that a feed of many zones holds a
/// few megabytes at most, whatever its length: a zone met again makes its sets again, the same.
final class FieldSets: Sendable {
    /// A set as JSON: the members of a `fields` object, without its braces, and each field noted
    /// as the check of a response would find it, from the first member's first byte.
    struct Written: Sendable {
        let members: [UInt8]
        let notes: [RawField]
        /// Whether the notes may be kept (see `JSONFields.end`); else the record is left to the
        /// check, as one drawn afresh with the same values would be.
        let plain: Bool
    }

    /// The page a set's references name records of (a folder on the page before it).
    static let page = 1
    static let zonesKept = 8

    let count: Int
    private let written = Mutex<[(zone: Int, sets: [Written?])]>([])

    init(count: Int) {
        self.count = count
    }

    /// Set `index` of `zone`'s, drawn as `FakeFieldSink.noteFields(fromSet:zone:of:)` draws it.
    static func random(_ index: Int, zone: Int, seed: UInt64) -> SplitMix {
        SplitMix(state: SplitMix.hash(seed, UInt64(zone), UInt64(index), 0xF1E1_D5E7))
    }

    /// A set's roll is its index: the note's rare values are picked by its roll's remainders
    /// (one note in 97 has a very long body, about 30 KB), so the sets hold each as often as
    /// notes drawn afresh do, within one in `count`, rather than as often as a thousand random
    /// rolls happen to (a few long bodies more or fewer moved the bench's rows by a tenth).
    static func roll(_ index: Int) -> UInt64 { UInt64(index) }

    /// Set `index` of `zone`'s as JSON, written now if it was not kept.
    func written(_ index: Int, zone: Int, of feed: FakeFeed) -> Written {
        let kept = written.withLock { zones -> Written? in
            zones.first { $0.zone == zone }.flatMap { $0.sets[index] }
        }
        if let kept { return kept }
        let set = Self.write(index, zone: zone, of: feed)
        written.withLock { zones in
            if let i = zones.firstIndex(where: { $0.zone == zone }) {
                zones[i].sets[index] = set
            } else {
                if zones.count == Self.zonesKept { zones.removeFirst() }
                var sets = [Written?](repeating: nil, count: count)
                sets[index] = set
                zones.append((zone, sets))
            }
        }
        return set
    }

    private static func write(_ index: Int, zone: Int, of feed: FakeFeed) -> Written {
        var fields = JSONFields(records: 1)
        fields.begin(capacity: 20)
        var r = random(index, zone: zone, seed: feed.settings.seed)
        feed.noteFields(&r, zone: zone, page: page, bad: nil, roll: roll(index), into: &fields)
        fields.end()
        let objects = fields.objects
        let notes = fields.noted
        let page = fields.finish()
        // The object is the page's whole text: its braces at the first and the last byte.
        return withExtendedLifetime(page) {
            let members = Array(page.buffer[1..<page.buffer.count - 1])
            return Written(members: members, notes: notes.map { $0.moved(by: -1) }, plain: objects.first?.known != nil)
        }
    }
}
