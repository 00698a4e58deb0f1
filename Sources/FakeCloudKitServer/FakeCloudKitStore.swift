import CloudKitModel
import Crypto
import FakeCloudKit
import Foundation
import NIOCore
import Synchronization

/// The fake server's whole state, behind one actor so that every request sees a consistent
/// history: the zones of each database with their append-only histories, the zone-event log of
/// each database, the web auth tokens, the pending faults and the counters.
///
/// A zone's history is the generator's entries for the configured `FakeSettings` (computed on
/// demand, never stored) followed by the entries added through the admin endpoints (or, with a
/// scenario file, only the scenario's entries and the added ones).
actor FakeCloudKitStore {
    struct ZoneKey: Hashable, Sendable {
        var owner: String
        var name: String
        init(_ id: ZoneID) {
            owner = id.ownerRecordName
            name = id.zoneName
        }
    }

    struct Zone: Sendable {
        var id: ZoneID
        /// The generator zone whose entries open the history, if any.
        var generatorIndex: Int?
        var generatedCount: Int
        var added: [RecordEntry] = []
        /// When each added entry becomes visible to queries (uptime nanoseconds): its index lag.
        var visibleAt: [UInt64] = []
        /// The generator of this zone's first entries, when not the server's own (the public
        /// database's `_defaultZone`).
        var generator: FakeFeed?
        /// Tokens carry the epoch they were issued in; a new incarnation of the zone, an
        /// expiry or an encrypted-data reset moves the zone to a new epoch.
        var epoch: Int
        var historyCount: Int { generatedCount + added.count }
    }

    enum ZoneEventKind: String, Sendable { case changed, deleted, purged, encryptedDataReset }

    struct ZoneEvent: Sendable {
        var zoneID: ZoneID
        var kind: ZoneEventKind
    }

    struct Database: Sendable {
        /// Live zones, and their creation order.
        var zones: [ZoneKey: Zone] = [:]
        var order: [ZoneKey] = []
        /// The database change feed: one event per zone creation, change, deletion, purge or reset.
        var events: [ZoneEvent] = []
        /// The epoch the feed's tokens carry; `database/expire-tokens` moves it, and every token
        /// issued before is then refused.
        var feedEpoch = 0
        /// The `_defaultZone`: no change feed, not in the zone list or the database feed, read by
        /// `records/query`.
        var defaultZone: Zone
    }

    static let databaseNames = ["private", "shared"]

    let configuration: FakeCloudKitServer.Configuration
    let feed: FakeFeed?
    /// Identifies the data the server started from; every token carries it.
    let feedTag: String
    var databases: [String: Database] = [:]
    var nextEpoch = 1
    var userRecordName: String
    var nextChangeTag = 1

    /// The server-to-server keys' public halves, by key ID.
    let serverPublicKeys: [String: P256.Signing.PublicKey]
    var initialTokens: Set<String>
    /// With a `tokenWindow`: the position of each token issued that may still be accepted, the
    /// next position, and the newest position used in an accepted request.
    var tokenPositions: [String: Int] = [:]
    var nextTokenPosition = 0
    var newestUsedPosition = -1
    var everIssued: Set<String> = []
    /// Configured tokens retired by the use of a rotated one (with a `tokenWindow`).
    var retiredTokens: Set<String> = []
    /// How a web auth token the server issued and no longer accepts is answered: 401
    /// `AUTHENTICATION_FAILED`, or 421 `AUTHENTICATION_REQUIRED` (`auth/stale-token-answer`).
    /// Which CloudKit sends is not documented.
    var staleTokenStatus = 401
    var faults: [Fault] = []
    /// The sessions and the sign-in page (`FakeCloudKitStore+SignIn`).
    var signIn = SignInState()
    /// Zones whose feed never advances (`faults/stall`), by zone name, and the records a
    /// repeating one repeats.
    var stalls: [String: StalledZone] = [:]
    var delayMilliseconds = 0
    var delayRemaining: Int?
    /// Doors that keep requests until enough are waiting (`faults/gate`).
    var gates: [Gate] = []
    var gatesMade = 0

    var requestsServed = 0
    var faultsServed = 0
    var traffic = Traffic()

    /// Recent snapshots of live records, by zone incarnation and history position: a nil-token
    /// fetch pages through one snapshot, and recomputing it for every page would be quadratic.
    /// A snapshot holds history positions, not records (see `snapshot`).
    struct SnapshotKey: Hashable {
        var database: String
        var zone: ZoneKey
        var epoch: Int
        var position: Int
    }
    var snapshots: [SnapshotKey: [Int]] = [:]
    /// What queries see of each `_defaultZone`'s generated entries (`FakeCloudKitStore+Query`),
    /// and the system indexes of each record type that lacks some (`indexes/set`).
    var querySummaries: [SnapshotKey: [FakeFeed.EntrySummary]] = [:]
    var queryIndexes: [String: QueryIndexes] = [:]
    var queryAnswers: [QueryAnswerKey: [QueryItem]] = [:]
    var queryAnswerOrder: [QueryAnswerKey] = []
    var snapshotOrder: [SnapshotKey] = []

    /// `records/changes` answers rendered before the server listened (`preparePages`), by
    /// request; any admin change drops them all, so that they are never stale.
    struct PreparedPageKey: Hashable {
        var database: String
        var zone: ZoneKey
        var syncToken: String?
        var limit: Int
    }
    var preparedPages: [PreparedPageKey: [UInt8]] = [:]
    var preparedPagesServed = 0

    /// Zone subscriptions by ID, push tokens by token, and the notification switches
    /// (`FakeCloudKitStore+Notifications`).
    var subscriptions: [String: Subscription] = [:]
    var pushTokens: [String: PushToken] = [:]
    /// The web courier's port, once it listens.
    var courierPort = 0
    /// The connections open now that have carried CloudKit requests, held until the first
    /// request after they close (`closedConnections`), so that no new connection can take an
    /// old one's identity.
    var openConnections: [ObjectIdentifier: any Channel] = [:]
    /// Those of `openConnections` counted in `traffic.connections` since `stats/reset`. The reset
    /// empties this and keeps the channels, so that a connection that closed just before it
    /// cannot be freed and its identity taken by a new one before its close is applied.
    var countedConnections: Set<ObjectIdentifier> = []
    /// The connections that closed since the last CloudKit request (`arrived(on:)`).
    nonisolated let closedConnections = Mutex<[ObjectIdentifier]>([])
    /// `faults/misdirect`: how many more requests the misdirected connection answers 421, and
    /// which connection that is (the first to carry a request once the fault was set).
    var misdirect: (remaining: Int, connection: ObjectIdentifier?)?
    var notificationSwitches = NotificationSwitches()
    var notificationCounts = NotificationCounts()

    // Async, so that the initializer is isolated to the actor once every property is set and
    // may call `createZone` (SE-0327).
    init(configuration: FakeCloudKitServer.Configuration) async throws {
        self.configuration = configuration
        serverPublicKeys = try Self.serverPublicKeys(configuration.serverKeys)
        userRecordName = configuration.userRecordName
        initialTokens = Set(configuration.webAuthTokens)
        for name in Self.databaseNames + ["public"] {
            let id = ZoneID(zoneName: ZoneID.defaultZoneName, zoneType: "DEFAULT_ZONE")
            var defaultZone = Zone(id: id, generatedCount: 0, epoch: 1)
            if name == "public", configuration.publicRecords > 0 {
                // Its own generator: one zone of the configured size, whose records the public
                // database's `_defaultZone` holds.
                var settings = configuration.settings
                settings.zones = 1
                settings.recordsPerZone = configuration.publicRecords
                defaultZone.generator = FakeFeed(settings: settings)
                defaultZone.generatorIndex = 0
                defaultZone.generatedCount = configuration.publicRecords
            }
            databases[name] = Database(defaultZone: defaultZone)
        }
        if let path = configuration.scenarioFile {
            let scenario = try Scenario.load(path: path)
            feed = nil
            feedTag = "s" + String(scenario.fingerprint, radix: 16)
            if let user = scenario.userRecordName { userRecordName = user }
            for zone in scenario.zones {
                let database = zone.database ?? "private"
                guard databases[database] != nil else {
                    throw Scenario.Error(path: path, message: "zone \(zone.zoneName): unknown database '\(database)' (private or shared)")
                }
                let id = ZoneID(zoneName: zone.zoneName, ownerRecordName: zone.ownerRecordName ?? configuration.settings.owner, zoneType: "REGULAR_CUSTOM_ZONE")
                if databases[database]!.zones[ZoneKey(id)] == nil { createZone(id, database: database) }
                append(zone.records ?? [], to: ZoneKey(id), database: database)
            }
        } else {
            let feed = FakeFeed(settings: configuration.settings)
            self.feed = feed
            let s = configuration.settings
            // Field sets are said only when set, so that a feed without them keeps its tag.
            let sets = s.fieldSets.map { "/sets\($0)" } ?? ""
            let described = "\(s.seed)/\(s.zones)/\(s.recordsPerZone)/\(s.pageSize)/\(s.badRecordEvery ?? 0)/\(s.owner)/\(s.churn)\(sets)"
            feedTag = "g" + String(Fingerprint.of(described), radix: 16)
            for index in 0..<s.zones {
                createZone(feed.zoneID(index), database: "private", generatorIndex: index, generatedCount: feed.entriesPerZone)
            }
        }
    }

    // MARK: Zones and history

    @discardableResult
    func createZone(_ id: ZoneID, database: String, generatorIndex: Int? = nil, generatedCount: Int = 0) -> Zone {
        var id = id
        if id.zoneType == nil { id.zoneType = "REGULAR_CUSTOM_ZONE" }
        let zone = Zone(id: id, generatorIndex: generatorIndex, generatedCount: generatedCount, epoch: newEpoch())
        databases[database]!.zones[ZoneKey(id)] = zone
        databases[database]!.order.append(ZoneKey(id))
        appendZoneEvent(ZoneEvent(zoneID: id, kind: .changed), database: database)
        return zone
    }

    /// Records a zone event in the database feed and tells the zone's subscribers.
    func appendZoneEvent(_ event: ZoneEvent, database: String) {
        databases[database]!.events.append(event)
        notifySubscribers(of: event.zoneID, database: database)
    }

    func newEpoch() -> Int {
        defer { nextEpoch += 1 }
        return nextEpoch
    }

    /// The zone a request names: `ownerRecordName` may be left out (or `__defaultOwner__`), as
    /// CloudKit then means the caller's zone.
    func zoneKey(named name: String, owner: String?, database: String) -> ZoneKey? {
        guard let db = databases[database] else { return nil }
        if let owner, owner != ZoneID.defaultOwner {
            let key = ZoneKey(ZoneID(zoneName: name, ownerRecordName: owner))
            return db.zones[key] == nil ? nil : key
        }
        return db.order.first { $0.name == name && db.zones[$0] != nil }
    }

    /// Entries `range` of a zone's history.
    func entries(of zone: Zone, range: Range<Int>) -> [RecordEntry] {
        var out: [RecordEntry] = []
        out.reserveCapacity(range.count)
        let generatedEnd = min(range.upperBound, zone.generatedCount)
        if range.lowerBound < generatedEnd, let feed = zone.generator ?? feed, let index = zone.generatorIndex {
            out += feed.entries(zone: index, range: range.lowerBound..<generatedEnd)
        }
        let addedStart = max(range.lowerBound, zone.generatedCount) - zone.generatedCount
        let addedEnd = range.upperBound - zone.generatedCount
        if addedStart < addedEnd { out += zone.added[addedStart..<addedEnd] }
        return out
    }

    /// The record name of each entry of `range` of a zone's history, as a key, and whether it
    /// deletes the record, passed to `body` with the entry's position; per-record errors are left
    /// out. The generator's entries are named without being made.
    func forEachEntryName(of zone: Zone, range: Range<Int>, _ body: (Int, RecordNameKey, Bool) -> Void) {
        let generatedEnd = min(range.upperBound, zone.generatedCount)
        if range.lowerBound < generatedEnd, let feed = zone.generator ?? feed, let index = zone.generatorIndex {
            // In chunks, so that a long history is never named all at once.
            var start = range.lowerBound
            while start < generatedEnd {
                let end = min(generatedEnd, start + 4096)
                for (i, entry) in feed.entryNames(zone: index, range: start..<end).enumerated() {
                    body(start + i, entry.name, entry.isDeletion)
                }
                start = end
            }
        }
        for position in max(range.lowerBound, zone.generatedCount)..<max(range.upperBound, zone.generatedCount) {
            switch zone.added[position - zone.generatedCount] {
            case .record(let record): body(position, RecordNameKey(record.recordName), false)
            case .deleted(let name): body(position, RecordNameKey(name), true)
            case .error, .unreadable: break
            }
        }
    }

    /// The live records at a history position, as the positions of their latest versions, in
    /// the order the records were first created: every record not deleted since. Positions never
    /// change once written (the history is append-only), so a snapshot can always be recomputed
    /// from its token. Only names are needed to compute it; the records of a page are made when
    /// the page is written, so a nil-token fetch answers its first page without making the whole
    /// zone first, and a snapshot takes 8 bytes per record.
    func snapshot(database: String, zone: Zone, position: Int) -> [Int] {
        let key = SnapshotKey(database: database, zone: ZoneKey(zone.id), epoch: zone.epoch, position: position)
        if let cached = snapshots[key] { return cached }
        // The latest version of each record, by creation; nil once the record is deleted (a
        // record created again takes a new place at the end).
        var latest: [Int?] = []
        latest.reserveCapacity(position)
        var placeOf = [RecordNameKey: Int](minimumCapacity: position)
        forEachEntryName(of: zone, range: 0..<position) { version, name, isDeletion in
            if isDeletion {
                if let place = placeOf.removeValue(forKey: name) { latest[place] = nil }
            } else if let place = placeOf[name] {
                latest[place] = version
            } else {
                placeOf[name] = latest.count
                latest.append(version)
            }
        }
        let positions = latest.compactMap { $0 }
        snapshots[key] = positions
        snapshotOrder.append(key)
        if snapshotOrder.count > 16 { snapshots[snapshotOrder.removeFirst()] = nil }
        return positions
    }

    /// The live records at positions `positions` of a zone's history (a page of a snapshot),
    /// made a run of consecutive positions at a time.
    func records(of zone: Zone, at positions: ArraySlice<Int>) -> [Record] {
        var records: [Record] = []
        records.reserveCapacity(positions.count)
        var runStart = positions.startIndex
        while runStart < positions.endIndex {
            var runEnd = runStart + 1
            while runEnd < positions.endIndex && positions[runEnd] == positions[runEnd - 1] + 1 { runEnd += 1 }
            for entry in entries(of: zone, range: positions[runStart]..<positions[runEnd - 1] + 1) {
                guard case .record(let record) = entry else {
                    assertionFailure("a snapshot holds the positions of records only")
                    continue
                }
                records.append(record)
            }
            runStart = runEnd
        }
        return records
    }

    /// The live version of each of `names` at the end of a zone's history, found from names.
    func liveRecords(named names: Set<String>, in zone: Zone) -> [String: Record] {
        let keys = Set(names.map(RecordNameKey.init))
        var latest: [RecordNameKey: Int] = [:]
        forEachEntryName(of: zone, range: 0..<zone.historyCount) { version, name, isDeletion in
            guard keys.contains(name) else { return }
            latest[name] = isDeletion ? nil : version
        }
        var live: [String: Record] = [:]
        for position in latest.values {
            if case .record(let record)? = entries(of: zone, range: position..<position + 1).first {
                live[record.recordName] = record
            }
        }
        return live
    }

    /// Appends entries to a custom zone's history (see `appendEntries`) and records the change
    /// in the database feed.
    func append(_ newEntries: [RecordEntry], to key: ZoneKey, database: String) {
        guard var zone = databases[database]!.zones[key], !newEntries.isEmpty else { return }
        appendEntries(newEntries, to: &zone)
        databases[database]!.zones[key] = zone
        appendZoneEvent(ZoneEvent(zoneID: zone.id, kind: .changed), database: database)
    }

    /// Appends entries to a database's `_defaultZone`, which has no change feed.
    func appendToDefaultZone(_ newEntries: [RecordEntry], database: String) {
        guard !newEntries.isEmpty else { return }
        var zone = databases[database]!.defaultZone
        // What each change is to a query subscriber: a creation, an update or a deletion of a
        // record of a type, as the records stood before.
        var live = liveRecords(named: Set(newEntries.compactMap(\.recordName)), in: zone).mapValues(\.recordType)
        var changes: [(name: String, recordType: String, firesOn: Int)] = []
        for entry in newEntries {
            switch entry {
            case .record(let record):
                changes.append((record.recordName, record.recordType, live[record.recordName] == nil ? 1 : 2))
                live[record.recordName] = record.recordType
            case .deleted(let name):
                if let type = live.removeValue(forKey: name) { changes.append((name, type, 3)) }
            case .error, .unreadable:
                break
            }
        }
        appendEntries(newEntries, to: &zone)
        databases[database]!.defaultZone = zone
        notifyQuerySubscribers(of: changes, database: database)
    }

    /// Records get the zone's ID and, when missing, a change tag, a modification stamp of now,
    /// and the creation stamp of the live record they update (or now, for a new record). Each
    /// entry becomes visible to queries after its own index lag.
    private func appendEntries(_ newEntries: [RecordEntry], to zone: inout Zone) {
        let original = zone
        let now = RecordStamp(timestamp: Int64(Date().timeIntervalSince1970 * 1000), userRecordName: userRecordName, deviceID: "fake-server")
        // Creation stamps of the live records, needed only when an added record has none.
        var createdStamps: [String: RecordStamp?] = [:]
        let unstamped = Set(newEntries.compactMap { if case .record(let r) = $0, r.created == nil { r.recordName } else { nil } })
        if !unstamped.isEmpty {
            createdStamps = liveRecords(named: unstamped, in: original).mapValues(\.created)
        }
        let uptime = DispatchTime.now().uptimeNanoseconds
        for entry in newEntries {
            zone.visibleAt.append(uptime + UInt64(Int.random(in: configuration.indexLag)) * 1_000_000)
            guard case .record(var record) = entry else {
                if case .deleted(let name) = entry { createdStamps[name] = .some(nil) }
                zone.added.append(entry)
                continue
            }
            record.zoneID = zone.id
            if record.recordChangeTag == nil {
                record.recordChangeTag = "fk" + String(nextChangeTag, radix: 36)
                nextChangeTag += 1
            }
            if record.created == nil { record.created = (createdStamps[record.recordName] ?? nil) ?? now }
            createdStamps[record.recordName] = .some(record.created)
            if record.modified == nil { record.modified = now }
            zone.added.append(.record(record))
        }
    }

    /// Removes a zone (deleted or purged) and records the event.
    func removeZone(_ key: ZoneKey, database: String, kind: ZoneEventKind) {
        guard let zone = databases[database]!.zones.removeValue(forKey: key) else { return }
        databases[database]!.order.removeAll { $0 == key }
        appendZoneEvent(ZoneEvent(zoneID: zone.id, kind: kind), database: database)
        snapshotOrder.removeAll { $0.zone == key && $0.database == database }
        snapshots = snapshots.filter { !($0.key.zone == key && $0.key.database == database) }
    }
}

/// FNV-1a, 64 bits: a stable fingerprint (Swift's `Hasher` is seeded per process).
enum Fingerprint {
    static func of(_ text: String) -> UInt64 { of(Array(text.utf8)) }

    static func of(_ bytes: [UInt8]) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01B3
        }
        return hash
    }
}
