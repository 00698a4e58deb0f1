import CloudKitModel
import ZoneFeed

/// The deterministic change-feed generator. The same settings give the same feed, byte for byte.
///
/// A zone's feed is a sequence of entries cut into pages. Every page is computed from its number
/// alone, so any page can be produced from a token without replaying the history and without
/// keeping state, whatever the size of the backfill:
/// - page `p` creates `creates` new records (slots `0..<creates`);
/// - a created record is *mortal* when its slot is 3 mod 10: page `p+1` deletes it, and when the
///   slot is also 3 mod 30 it is *reborn*: page `p+2` creates a record with the same name again;
/// - slots 7 mod 15 are updated by page `p+1`; slots 11 mod 25 are updated again later in the
///   same page (the same record twice in one page).
/// Without churn (`FakeSettings.churn` false) every page only creates `pageSize` new records.
/// Tokens are positions (entries consumed) in the zone's feed, so a feed that grows continues
/// from a stored token, and a token beyond the end of a shrunken feed is rejected as expired.
public struct FakeFeed: Sendable {
    public let settings: FakeSettings
    /// New records per page.
    public let creates: Int
    let seedTag: String
    /// The zones' IDs, made once: every record and most references carry one.
    let cachedZoneIDs: [ZoneID]
    /// The notes' field sets, when the settings ask for them.
    let fieldSets: FieldSets?
    /// How many sets a zone's notes take their fields from; nil when each draws its own.
    package var fieldSetCount: Int? { fieldSets?.count }

    public init(settings: FakeSettings) {
        self.settings = settings
        let k = max(1, settings.pageSize)
        var c = k
        while settings.churn && c > 1 && FakeFeed.fullPageSize(creates: c) > k { c -= 1 }
        creates = c
        // Notes from field sets are another feed: its tokens are not this one's.
        let tag = settings.fieldSets.map { SplitMix.hash(settings.seed, 0x5EED, UInt64($0)) } ?? SplitMix.hash(settings.seed, 0x5EED)
        seedTag = String(tag & 0xFFFF_FFFF, radix: 16)
        cachedZoneIDs = (0..<settings.zones).map { FakeFeed.makeZoneID($0, owner: settings.owner) }
        fieldSets = settings.fieldSets.map { FieldSets(count: $0) }
    }

    // MARK: Zones

    public var zoneIDs: [ZoneID] { (0..<settings.zones).map(zoneID) }

    public func zoneID(_ index: Int) -> ZoneID {
        cachedZoneIDs.indices.contains(index) ? cachedZoneIDs[index] : FakeFeed.makeZoneID(index, owner: settings.owner)
    }

    static func makeZoneID(_ index: Int, owner: String) -> ZoneID {
        ZoneID(zoneName: zoneName(index), ownerRecordName: owner, zoneType: "REGULAR_CUSTOM_ZONE")
    }

    public static func zoneName(_ index: Int) -> String {
        index < 9 ? "Zone0\(index + 1)" : "Zone\(index + 1)"
    }

    public func zoneIndex(of zone: ZoneID) -> Int? {
        guard zone.ownerRecordName == settings.owner else { return nil }
        return (0..<settings.zones).first { FakeFeed.zoneName($0) == zone.zoneName }
    }

    // MARK: Page layout

    static func count(_ n: Int, _ modulus: Int, _ residue: Int) -> Int {
        n > residue ? (n - residue - 1) / modulus + 1 : 0
    }

    static func isMortal(_ slot: Int) -> Bool { slot % 10 == 3 }
    static func isReborn(_ slot: Int) -> Bool { slot % 30 == 3 }
    static func isUpdatedNextPage(_ slot: Int) -> Bool { slot % 15 == 7 }
    static func isRepeatedInPage(_ slot: Int) -> Bool { slot % 25 == 11 }

    static func fullPageSize(creates c: Int) -> Int {
        c + count(c, 10, 3) + count(c, 30, 3) + count(c, 15, 7) + count(c, 25, 11)
    }

    /// Entries in page `p` of an unbounded feed.
    func pageSize(_ p: Int) -> Int {
        let c = creates
        guard settings.churn else { return c }
        var n = c + FakeFeed.count(c, 25, 11)
        if p >= 1 { n += FakeFeed.count(c, 10, 3) + FakeFeed.count(c, 15, 7) }
        if p >= 2 { n += FakeFeed.count(c, 30, 3) }
        return n
    }

    /// The page holding entry `index`, and the index of that page's first entry.
    func page(containing index: Int) -> (page: Int, start: Int) {
        let s0 = pageSize(0)
        let s1 = pageSize(1)
        let s = pageSize(2)
        if index < s0 { return (0, 0) }
        if index < s0 + s1 { return (1, s0) }
        let p = 2 + (index - s0 - s1) / s
        return (p, s0 + s1 + (p - 2) * s)
    }

    /// What happens at each position of page `p`.
    enum Event: Hashable {
        case create(page: Int, slot: Int)
        case repeatUpdate(page: Int, slot: Int)
        case nextPageUpdate(page: Int, slot: Int)  // updates a record created on page `page`
        case delete(page: Int, slot: Int)
        case recreate(page: Int, slot: Int)
    }

    func events(ofPage p: Int) -> [Event] {
        guard settings.churn else { return (0..<creates).map { .create(page: p, slot: $0) } }
        var others: [Event] = []
        if p >= 1 {
            for slot in 0..<creates {
                if FakeFeed.isMortal(slot) { others.append(.delete(page: p - 1, slot: slot)) }
                if FakeFeed.isUpdatedNextPage(slot) { others.append(.nextPageUpdate(page: p - 1, slot: slot)) }
            }
        }
        if p >= 2 {
            for slot in 0..<creates where FakeFeed.isReborn(slot) { others.append(.recreate(page: p - 2, slot: slot)) }
        }
        var events: [Event] = []
        events.reserveCapacity(pageSize(p))
        var repeats: [Event] = []
        var next = 0
        for slot in 0..<creates {
            events.append(.create(page: p, slot: slot))
            if FakeFeed.isRepeatedInPage(slot) { repeats.append(.repeatUpdate(page: p, slot: slot)) }
            // Spread the other kinds through the page; repeats come a few entries after their create.
            if slot % 4 == 0, next < others.count {
                events.append(others[next])
                next += 1
            }
            if slot % 5 == 4, !repeats.isEmpty { events.append(repeats.removeFirst()) }
        }
        events += others[next...]
        events += repeats
        return events
    }

    // MARK: Entries

    /// The entries of positions `range` of a zone's feed.
    public func entries(zone: Int, range: Range<Int>) -> [RecordEntry] {
        var out: [RecordEntry] = []
        out.reserveCapacity(range.count)
        forEachEvent(in: range) { event, position in
            out.append(entry(zone: zone, event: event, position: position))
        }
        return out
    }

    /// The entries of positions `range`, each record's fields written as the JSON CloudKit sends
    /// and kept as a response's are (`RawFields`), noted as they are written where the check of
    /// a response's fields would keep them (`JSONFields`) and checked otherwise: what the
    /// in-process source hands the engine, so that its records take the path of records read
    /// from CloudKit. The same entries as `entries(zone:range:)`, which holds them in the model.
    /// Throws only if a record left to the check holds JSON its reader refuses.
    public func entriesWithJSONFields(zone: Int, range: Range<Int>) throws -> [RecordEntry] {
        var (out, records, fields) = entriesWritingFields(zone: zone, range: range)
        let page = fields.finish()
        for (index, read) in zip(records, try RecordFields.read(from: page, written: fields.objects, fields: fields.noted)) {
            out[index].takeFields(read)
        }
        return out
    }

    /// The entries of positions `range` without their records' fields, which are written into
    /// `fields` (not finished); where each record is in the entries, in the order of their
    /// fields in the page.
    package func entriesWritingFields(zone: Int, range: Range<Int>) -> (entries: [RecordEntry], records: [Int], fields: JSONFields) {
        var fields = JSONFields(records: range.count)
        var out: [RecordEntry] = []
        out.reserveCapacity(range.count)
        var records: [Int] = []
        records.reserveCapacity(range.count)
        forEachEvent(in: range) { event, position in
            // Appended, then looked at in the array: looked at first, the entry was copied into
            // it, a retain and release of each of its strings (Benchmarks/run: 620 instructions
            // a record).
            out.append(entry(zone: zone, event: event, position: position, fields: &fields))
            if case .record = out[out.count - 1] { records.append(out.count - 1) }
        }
        return (out, records, fields)
    }

    /// The record name of each entry of positions `range`, as a key, and whether the entry
    /// deletes the record rather than writing a version of it: all that finding the live records
    /// needs, at a small part of the cost of the entries (neither fields nor names are made).
    public func entryNames(zone: Int, range: Range<Int>) -> [(name: RecordNameKey, isDeletion: Bool)] {
        var out: [(name: RecordNameKey, isDeletion: Bool)] = []
        out.reserveCapacity(range.count)
        forEachEvent(in: range) { event, _ in
            switch event {
            case .create(let page, let slot), .repeatUpdate(let page, let slot), .nextPageUpdate(let page, let slot),
                .recreate(let page, let slot):
                let (a, b) = recordNameBits(zone: zone, page: page, slot: slot)
                out.append((.uuid(a, b), false))
            case .delete(let page, let slot):
                let (a, b) = recordNameBits(zone: zone, page: page, slot: slot)
                out.append((.uuid(a, b), true))
            }
        }
        return out
    }

    /// Calls `body` with the event at each position of `range`, in order, laying out each page once.
    func forEachEvent(in range: Range<Int>, _ body: (Event, Int) -> Void) {
        var index = range.lowerBound
        while index < range.upperBound {
            let (p, start) = page(containing: index)
            let events = events(ofPage: p)
            let end = min(range.upperBound, start + events.count)
            for i in index..<end { body(events[i - start], i) }
            index = end
        }
    }

    /// The entry at a position, with its record's fields in the model.
    func entry(zone: Int, event: Event, position: Int) -> RecordEntry {
        var fields = ModelFields()
        let made = entry(zone: zone, event: event, position: position, fields: &fields)
        guard case .record(var record) = made else { return made }
        record.storedFields = .values(fields.fields)
        return .record(record)
    }

    /// The entry at a position, its record's fields put into `fields` (the record's own are left
    /// empty).
    func entry<Fields: FakeFieldSink>(zone: Int, event: Event, position: Int, fields: inout Fields) -> RecordEntry {
        switch event {
        case .create(let page, let slot):
            return .record(record(zone: zone, page: page, slot: slot, version: position, allowBad: true, fields: &fields))
        case .repeatUpdate(let page, let slot), .nextPageUpdate(let page, let slot), .recreate(let page, let slot):
            return .record(record(zone: zone, page: page, slot: slot, version: position, allowBad: false, fields: &fields))
        case .delete(let page, let slot):
            return .deleted(recordName: recordName(zone: zone, page: page, slot: slot))
        }
    }

    public func recordName(zone: Int, page: Int, slot: Int) -> String {
        let (a, b) = recordNameBits(zone: zone, page: page, slot: slot)
        return Hex.uuid(a, b)
    }

    /// The 128 bits a record name spells (see `RecordNameKey`).
    func recordNameBits(zone: Int, page: Int, slot: Int) -> (UInt64, UInt64) {
        let a = SplitMix.hash(settings.seed, UInt64(zone) &* 0x1_0000_0001, UInt64(page), UInt64(slot))
        return (a, SplitMix.hash(a, 0xC10D))
    }

    /// Record type by name: about 70% notes, 20% folders, 10% tags.
    static func recordType(hash: UInt64) -> String {
        switch hash % 10 {
        case 0, 1: return "Folder"
        case 2: return "Tag"
        default: return "Note"
        }
    }

    public static let recordTypes = ["Note", "Folder", "Tag"]

    /// Whether a record version was made unfit on purpose (see `FakeSettings.badRecordEvery`).
    func badKind(nameHash: UInt64, allowBad: Bool) -> Int? {
        guard allowBad, let every = settings.badRecordEvery, every > 0 else { return nil }
        guard (nameHash >> 20) % UInt64(every) == 0 else { return nil }
        return Int((nameHash >> 40) & 1)
    }

    /// A record version, its fields put into `fields` (the record's own are left empty).
    func record<Fields: FakeFieldSink>(zone: Int, page: Int, slot: Int, version: Int, allowBad: Bool, fields: inout Fields) -> Record {
        let name = recordName(zone: zone, page: page, slot: slot)
        let nameHash = SplitMix.hash(settings.seed, UInt64(zone), UInt64(page), UInt64(slot), 0x7E)
        let type = FakeFeed.recordType(hash: nameHash)
        var r = SplitMix(state: SplitMix.hash(nameHash, UInt64(version)))
        let zoneID = zoneID(zone)
        let (createdMs, modifiedMs) = FakeFeed.stamps(page: page, slot: slot, version: version, random: &r)
        switch type {
        case "Note":
            fields.begin(capacity: 20)
            let bad = badKind(nameHash: nameHash, allowBad: allowBad)
            if let sets = fieldSets, bad == nil {
                fields.noteFields(fromSet: Int(r.next() % UInt64(sets.count)), zone: zone, of: self)
            } else {
                noteFields(&r, zone: zone, page: page, bad: bad, into: &fields)
            }
        case "Folder":
            fields.begin(capacity: 3)
            let words = 1 + Int(r.next() % 3)
            FakeText.words(&r, count: words) { fields.text("name", $0) }
            fields.int64("color", Int64(r.next() % 0xFFFFFF))
            if r.next() % 3 == 0 {
                let parent = recordNameBits(zone: zone, page: max(0, page - 1), slot: Int(r.next() % UInt64(creates)))
                fields.reference("parent", FakeReference(name: parent, zoneID: nil, action: "NONE"))
            }
        default:
            fields.begin(capacity: 2)
            fields.text("label", literal: FakeText.word(&r))
            fields.int64("uses", Int64(r.next() % 1000))
        }
        fields.end()
        return Record(
            recordName: name, recordType: type,
            recordChangeTag: Hex.short(SplitMix.hash(nameHash, UInt64(version), 0x7A6)),
            created: RecordStamp(timestamp: createdMs, userRecordName: FakeFeed.users[Int(nameHash % 3)], deviceID: FakeFeed.devices[Int(nameHash % 5)]),
            modified: RecordStamp(timestamp: modifiedMs, userRecordName: FakeFeed.users[Int(r.next() % 3)], deviceID: "D1"),
            zoneID: zoneID)
    }

    /// A version's creation and modification times in milliseconds; the modification is drawn
    /// first from the version's random sequence, so `record` and `entrySummaries` agree.
    static func stamps(page: Int, slot: Int, version: Int, random r: inout SplitMix) -> (created: Int64, modified: Int64) {
        let createdMs = Int64(1_700_000_000_000) + Int64(page) * 60_000 + Int64(slot) * 97
        let modifiedMs = Int64(1_700_000_000_000) + Int64(version) * 1_000 + Int64(r.next() % 997)
        return (createdMs, max(createdMs, modifiedMs))
    }

    /// What a query sees of an entry: its record's name, type and modification time, or that it
    /// deletes the record.
    public struct EntrySummary: Sendable {
        public var name: RecordNameKey
        /// nil for a deletion.
        public var recordType: String?
        public var modifiedMs: Int64
    }

    /// The summary of each entry of positions `range`, without making fields: what a query over a
    /// large zone needs to filter and sort, at a small part of the cost of the entries.
    public func entrySummaries(zone: Int, range: Range<Int>) -> [EntrySummary] {
        var out: [EntrySummary] = []
        out.reserveCapacity(range.count)
        forEachEvent(in: range) { event, position in
            switch event {
            case .create(let page, let slot), .repeatUpdate(let page, let slot), .nextPageUpdate(let page, let slot),
                .recreate(let page, let slot):
                let (a, b) = recordNameBits(zone: zone, page: page, slot: slot)
                let nameHash = SplitMix.hash(settings.seed, UInt64(zone), UInt64(page), UInt64(slot), 0x7E)
                var r = SplitMix(state: SplitMix.hash(nameHash, UInt64(position)))
                let stamps = FakeFeed.stamps(page: page, slot: slot, version: position, random: &r)
                out.append(EntrySummary(name: .uuid(a, b), recordType: FakeFeed.recordType(hash: nameHash), modifiedMs: stamps.modified))
            case .delete(let page, let slot):
                let (a, b) = recordNameBits(zone: zone, page: page, slot: slot)
                out.append(EntrySummary(name: .uuid(a, b), recordType: nil, modifiedMs: 0))
            }
        }
        return out
    }

    // Spelled out rather than interpolated: interpolation costs more than the rest of a stamp.
    static let users = ["_user0", "_user1", "_user2"]
    static let devices = ["D0", "D1", "D2", "D3", "D4"]

    /// A note's fields, drawn in a fixed order, which the feed depends on. A note made unfit on
    /// purpose (`bad`, see `badKind`) draws the same values and says something else of one.
    /// `roll` (the note's first draw, which picks its rare values: an empty title, a very long
    /// body, an extreme number) is given for a field set (`FieldSets.roll`).
    func noteFields<Fields: FakeFieldSink>(_ r: inout SplitMix, zone: Int, page: Int, bad: Int?, roll given: UInt64? = nil, into f: inout Fields) {
        let roll = given ?? r.next()
        if bad == 0 {
            if roll % 11 != 0 { FakeText.title(&r) { _ in } }
            f.text("title", literal: "bad\u{0}title")
        } else if roll % 11 == 0 {
            f.text("title", literal: "")
        } else {
            FakeText.title(&r) { f.text("title", $0) }
        }
        switch roll % 97 {
        case 5:  // very long
            var unit = FakeText.words(&r, count: 12) + " "
            unit.withUTF8 { f.text("body", repeating: $0, count: 400) }
        case 6: f.text("body", literal: "")
        default: FakeText.sentence(&r) { f.text("body", $0) }
        }
        let wordCount: Int64
        switch roll % 53 {
        case 1: wordCount = Int64.max
        case 2: wordCount = Int64.min
        case 3: wordCount = 9_007_199_254_740_993  // 2^53 + 1: exact beyond doubles
        default: wordCount = Int64(r.next() % 5000)
        }
        if bad == 1 { f.text("wordCount", literal: "many") } else { f.int64("wordCount", wordCount) }
        switch roll % 41 {
        case 1: f.double("rating", -0.0)
        case 2: f.double("rating", 1.7976931348623157e308)
        case 3: f.double("rating", Double.leastNonzeroMagnitude)
        default: f.double("rating", Double(r.next() % 10_000) / 100)
        }
        if roll % 29 == 1 {
            f.timestamp("editedAt", -62_135_596_800_000)  // year 1, a sentinel seen in the wild
        } else if roll % 7 != 0 {
            f.timestamp("editedAt", 1_600_000_000_000 + Int64(r.next() % 100_000_000_000))
        }
        let thumbnailCount = Int(r.next() % 24)
        f.bytes("thumbnail", FakeBytes.draw(&r, count: thumbnailCount), encrypted: false)
        if roll % 5 != 0 {
            let folder = recordNameBits(zone: zone, page: max(0, page - 1), slot: Int(r.next() % UInt64(creates)))
            let action: StaticString = r.next() % 2 == 0 ? "NONE" : "DELETE_SELF"
            f.reference("folder", FakeReference(name: folder, zoneID: zoneID(zone), action: action))
        }
        if roll % 3 != 0 { f.asset("attachment", FakeAsset.draw(&r)) }
        if roll % 4 != 1 { f.location("place", FakeLocation.draw(&r)) }
        f.beginList("tags", tag: "STRING_LIST")
        for _ in 0..<Int(r.next() % 4) { f.text(nil, literal: FakeText.word(&r)) }
        f.endList()
        f.beginList("counts", tag: "INT64_LIST")
        for i in 0..<Int(r.next() % 4) { f.int64(nil, i == 1 ? Int64.min : Int64(r.next() % 100)) }
        f.endList()
        f.beginList("scores", tag: "DOUBLE_LIST")
        for _ in 0..<Int(r.next() % 3) { f.double(nil, Double(r.next() % 1000) / 8) }
        f.endList()
        f.beginList("reminders", tag: "TIMESTAMP_LIST")
        for _ in 0..<Int(r.next() % 3) { f.timestamp(nil, 1_650_000_000_000 + Int64(r.next() % 10_000_000_000)) }
        f.endList()
        f.beginList("chunks", tag: "BYTES_LIST")
        for _ in 0..<Int(r.next() % 3) {
            let count = 1 + Int(r.next() % 8)
            f.bytes(nil, FakeBytes.draw(&r, count: count), encrypted: false)
        }
        f.endList()
        f.beginList("related", tag: "REFERENCE_LIST")
        for _ in 0..<Int(r.next() % 3) {
            f.reference(nil, FakeReference(name: recordNameBits(zone: zone, page: page, slot: Int(r.next() % UInt64(creates))), zoneID: nil, action: "NONE"))
        }
        f.endList()
        if roll % 6 == 0 { f.bytes("secret", FakeBytes.draw(&r, count: 12), encrypted: true) }
        if roll % 9 == 0 {
            f.beginList("trail", tag: "LOCATION_LIST")
            f.location(nil, FakeLocation.draw(&r))
            f.location(nil, FakeLocation.draw(&r))
            f.endList()
        }
    }

    // MARK: Tokens

    /// The number of entries in a zone's feed.
    public var entriesPerZone: Int { settings.recordsPerZone }

    public func zoneToken(zone: Int, position: Int) -> ChangeToken {
        ChangeToken("fk1-\(seedTag)-\(zone)-\(position)")
    }

    /// The position a token stands for; nil when the token is not one of this feed's.
    public func position(of token: ChangeToken, zone: Int) -> Int? {
        let parts = token.value.split(separator: "-")
        guard parts.count == 4, parts[0] == "fk1", parts[1] == seedTag, Int(parts[2]) == zone,
            let position = Int(parts[3]), position >= 0, position <= entriesPerZone
        else { return nil }
        return position
    }

    public var databaseToken: ChangeToken {
        ChangeToken("fkdb-\(seedTag)-\(settings.zones)-\(settings.recordsPerZone)")
    }

    /// The database feed since `token`: every zone when the token is nil or from other settings,
    /// nothing when it is current; zones that no longer exist are reported deleted.
    public func databaseChanges(since token: ChangeToken?) -> DatabaseChangePage {
        if token == databaseToken {
            return DatabaseChangePage(modifiedZones: [], deletedZones: [], syncToken: databaseToken, moreComing: false)
        }
        var deleted: [ZoneDeletion] = []
        if let parts = token?.value.split(separator: "-"), parts.count == 4, parts[0] == "fkdb", parts[1] == seedTag,
            let oldZones = Int(parts[2]), oldZones > settings.zones
        {
            deleted = (settings.zones..<oldZones).map { ZoneDeletion(zoneID: zoneID($0), reason: .deleted) }
        }
        return DatabaseChangePage(modifiedZones: zoneIDs, deletedZones: deleted, syncToken: databaseToken, moreComing: false)
    }
}

extension RecordEntry {
    /// Gives a record its fields where it lies. Swift still copies the record on its way out of
    /// the entry and back, a retain and release of each of its strings (about 560 instructions
    /// a record, `Benchmarks/run`); of the forms tried, this costs least, 118 fewer than taking
    /// the entry out of the array by a swap.
    fileprivate mutating func takeFields(_ fields: consuming RecordFields) {
        switch consume self {
        case .record(var record):
            record.storedFields = fields
            self = .record(record)
        default:
            preconditionFailure("an entry listed as a record is not one")
        }
    }
}
