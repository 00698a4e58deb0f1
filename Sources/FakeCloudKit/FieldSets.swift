import CloudKitModel
import Synchronization

/// The field sets notes take their fields from when `FakeSettings.fieldSets` is set: a zone's
/// set is drawn by `FakeFeed.noteFields` from its own random sequence, the same for every sink,
/// and written as CloudKit's JSON once, with its notes (`JSONFields`), the first time a page
/// needs it, as a small page of its own (`RawFields.object`). A note then takes its set's object
/// as it is, where drawing and writing a note's fields took about 12,000 instructions, and
/// copying a written set's bytes and notes into the page about 1,300 a record (`Benchmarks/run`).
///
/// Sets are kept for the `zonesKept` zones asked for last (a page asks once), so that a feed of
/// many zones holds at most that many zones' sets (2.4 MB a zone at 1,024 sets, 9.5 MB at
/// 4,096), whatever its length, besides those pages still hold: a zone met again writes its
/// sets again, the same. Sixteen: as many zones as a pipeline writes at once, at most.
final class FieldSets: Sendable {
    /// A set as JSON: its `fields` object, from its opening brace to past its closing one, as a
    /// page of its own with each field noted as the check of a response would find it.
    struct Written: Sendable {
        let object: RawFields
        /// Whether the notes may be kept (see `JSONFields.end`): a note then takes the object as
        /// it is, without a copy (`RecordFields.WrittenFields.lent`); else its text is copied
        /// into the note's page and left to the check, as one drawn afresh with the same values
        /// would be.
        let plain: Bool
    }

    /// One zone's sets, as written so far. A page asks for its zone's once and keeps them, so
    /// that the notes of two zones written at once on two threads do not each take a lock and
    /// retain an object that both share (a few percent of an in-process run's CPU).
    final class Zone: Sendable {
        let zone: Int
        private let sets: Mutex<[Written?]>

        init(zone: Int, count: Int) {
            self.zone = zone
            sets = Mutex([Written?](repeating: nil, count: count))
        }

        /// Set `index` as JSON, written now if it was not yet (by the first of two pages that
        /// ask at once: the other's is let go).
        func written(_ index: Int, of feed: FakeFeed) -> Written {
            if let kept = sets.withLock({ $0[index] }) { return kept }
            let set = FieldSets.write(index, zone: zone, of: feed)
            return sets.withLock { sets in
                if let kept = sets[index] { return kept }
                sets[index] = set
                return set
            }
        }
    }

    /// The page a set's references name records of (a folder on the page before it).
    static let page = 1
    static let zonesKept = 16

    let count: Int
    private let zones = Mutex<[Zone]>([])

    init(count: Int) {
        self.count = count
    }

    /// `zone`'s sets, kept or new; the zone asked for least lately is let go past `zonesKept`.
    func zone(_ zone: Int) -> Zone {
        zones.withLock { zones in
            if let i = zones.firstIndex(where: { $0.zone == zone }) {
                let kept = zones.remove(at: i)
                zones.append(kept)
                return kept
            }
            if zones.count == Self.zonesKept { zones.removeFirst() }
            let new = Zone(zone: zone, count: count)
            zones.append(new)
            return new
        }
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

    /// Set `index` of `zone`'s drawn into `fields`: the one recipe both the JSON written once and
    /// every other sink (the model) follow, so that the two cannot disagree.
    static func draw<Fields: FakeFieldSink>(_ index: Int, zone: Int, of feed: FakeFeed, into fields: inout Fields) {
        var r = random(index, zone: zone, seed: feed.settings.seed)
        feed.noteFields(&r, zone: zone, page: page, bad: nil, roll: roll(index), into: &fields)
    }

    private static func write(_ index: Int, zone: Int, of feed: FakeFeed) -> Written {
        var fields = JSONFields(records: 1)
        fields.begin(capacity: 20)
        draw(index, zone: zone, of: feed, into: &fields)
        fields.end()
        let known = fields.objects.first?.known
        let notes = fields.noted
        let page = fields.finish()
        // The object is the page's whole text, and its notes are from its first byte.
        return withExtendedLifetime(page) {
            notes.withUnsafeBufferPointer { notes in
                let kept = known.map { UnsafeBufferPointer(rebasing: notes[$0.fields]) } ?? UnsafeBufferPointer(start: nil, count: 0)
                return Written(object: .object(copying: page.buffer, fields: kept), plain: known != nil)
            }
        }
    }
}
