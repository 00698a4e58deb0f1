import CloudKitModel
import NIOConcurrencyHelpers
import ZoneFeed

/// A change source whose zones hold lists of record names, paged `pageSize` at a time, with
/// tokens that say where a page ends (`"<zone>@<position>"`): what a test of the engine needs to
/// script (a zone stuck repeating its token, an expired token, a zone the server lost) and to
/// watch (every fetch, in order).
public final class ScriptedSource: ChangeSource, @unchecked Sendable {
    public struct Fetch: Sendable, Hashable {
        public var zone: String
        public var token: String?
    }

    private struct State {
        var feeds: [String: [String]]
        var stuck: [String: Stall] = [:]
        var expired: Set<String> = []
        var missing: Set<String> = []
        var fetches: [Fetch] = []
        var deletedZones: [ZoneDeletion] = []
        var databaseFetches: [String?] = []
        var endlessDatabaseFeed = false
        var throttled = 0.0
    }

    public let pageSize: Int
    /// Seconds each fetch of a zone's page counts as throttled (`throttledSeconds`, which adds up
    /// over the source's life, as a client's does).
    public var throttledPerFetch = 0.0
    /// The bytes each record of a page is said to have come in (`ZoneChangePage.byteCount`).
    public let bytesPerRecord: Int
    private let state: NIOLockedValueBox<State>

    /// `feeds`: each zone's records, oldest first.
    public init(feeds: [String: [String]], pageSize: Int = 3, bytesPerRecord: Int = 0) {
        self.pageSize = pageSize
        self.bytesPerRecord = bytesPerRecord
        state = NIOLockedValueBox(State(feeds: feeds))
    }

    /// How a stuck zone answers every fetch, always saying more is coming.
    public enum Stall: Sendable {
        /// No records and the token it was asked from.
        case sameTokenNoRecords
        /// Its first three records and the token it was asked from.
        case sameTokenSameRecords
        /// No records and a new token each time.
        case newTokensNoRecords
        /// Its first three records and a new token each time.
        case newTokensSameRecords
        /// Its first three records with one token, then the next two with another that leads
        /// back to the first: each page unlike the one before, each token new to its fetch.
        case cyclingTokens
    }

    /// The zone answers every fetch as `how` says, for ever.
    public func makeStuck(_ zone: String, _ how: Stall = .sameTokenNoRecords) { state.withLockedValue { $0.stuck[zone] = how } }
    /// A fetch from this token fails as expired (`CHANGE_TOKEN_EXPIRED`).
    public func expire(_ token: String) { state.withLockedValue { _ = $0.expired.insert(token) } }
    /// The server no longer knows the zone (`ZONE_NOT_FOUND`).
    public func lose(_ zone: String) { state.withLockedValue { _ = $0.missing.insert(zone) } }
    /// Replaces a zone's feed, as after a reset on the server.
    public func replace(_ zone: String, with names: [String]) { state.withLockedValue { $0.feeds[zone] = names } }
    /// Appends records to a zone's feed.
    public func append(_ names: [String], to zone: String) { state.withLockedValue { $0.feeds[zone, default: []] += names } }
    /// The next database page reports the zone deleted.
    public func delete(_ zone: String) {
        state.withLockedValue {
            $0.feeds[zone] = nil
            $0.deletedZones.append(ZoneDeletion(zoneID: ZoneID(zoneName: zone), reason: .deleted))
        }
    }

    public var fetches: [Fetch] { state.withLockedValue { $0.fetches } }
    /// The tokens the database's change feed was fetched from, in order.
    public var databaseFetches: [String?] { state.withLockedValue { $0.databaseFetches } }
    /// From now on each database page names one new zone, with a new token, and says more is
    /// coming, for ever.
    public func makeDatabaseFeedEndless() { state.withLockedValue { $0.endlessDatabaseFeed = true } }

    // MARK: ChangeSource

    public func currentUser() async throws -> String? { nil }
    public var namedZones: [ZoneID]? { nil }
    public func throttledSeconds() async -> Double { state.withLockedValue { $0.throttled } }

    public func fetchDatabaseChanges(since token: ChangeToken?) async throws -> DatabaseChangePage {
        state.withLockedValue { state in
            state.databaseFetches.append(token?.value)
            if state.endlessDatabaseFeed {
                let n = state.databaseFetches.count
                state.feeds["new-\(n)"] = []
                return DatabaseChangePage(
                    modifiedZones: [ZoneID(zoneName: "new-\(n)")], deletedZones: [], syncToken: ChangeToken("db-endless@\(n)"), moreComing: true)
            }
            let deleted = state.deletedZones
            state.deletedZones = []
            let zones = state.feeds.keys.sorted().map { ZoneID(zoneName: $0) }
            return DatabaseChangePage(
                modifiedZones: zones, deletedZones: deleted, syncToken: ChangeToken("db@\(state.fetches.count)"), moreComing: false)
        }
    }

    public func fetchZoneChanges(in zone: ZoneID, since token: ChangeToken?) async throws -> ZoneChangePage {
        state.withLockedValue { $0.throttled += throttledPerFetch }
        let name = zone.zoneName
        return try state.withLockedValue { state in
            state.fetches.append(Fetch(zone: name, token: token?.value))
            if state.missing.contains(name) { throw SyncError(.zoneNotFound, zoneID: zone, message: "zone \(name) not found") }
            if let token, state.expired.contains(token.value) {
                throw SyncError(.changeTokenExpired, zoneID: zone, message: "token \(token.value) expired")
            }
            if let stall = state.stuck[name] {
                let first = (state.feeds[name] ?? []).prefix(3).map {
                    RecordEntry.record(Record(recordName: $0, recordType: "Note", recordChangeTag: "\($0)-tag"))
                }
                let fetches = state.fetches.count
                switch stall {
                case .sameTokenNoRecords:
                    return ZoneChangePage(zoneID: zone, entries: [], syncToken: token ?? ChangeToken("\(name)@0"), moreComing: true)
                case .sameTokenSameRecords:
                    return ZoneChangePage(zoneID: zone, entries: first, syncToken: token ?? ChangeToken("\(name)@0"), moreComing: true)
                case .newTokensNoRecords:
                    return ZoneChangePage(zoneID: zone, entries: [], syncToken: ChangeToken("\(name)@stalled-\(fetches)"), moreComing: true)
                case .newTokensSameRecords:
                    return ZoneChangePage(zoneID: zone, entries: first, syncToken: ChangeToken("\(name)@stalled-\(fetches)"), moreComing: true)
                case .cyclingTokens where token?.value == "\(name)@cycle-1":
                    let next = (state.feeds[name] ?? []).dropFirst(3).prefix(2).map {
                        RecordEntry.record(Record(recordName: $0, recordType: "Note", recordChangeTag: "\($0)-tag"))
                    }
                    return ZoneChangePage(zoneID: zone, entries: next, syncToken: ChangeToken("\(name)@cycle-0"), moreComing: true)
                case .cyclingTokens:
                    return ZoneChangePage(zoneID: zone, entries: first, syncToken: ChangeToken("\(name)@cycle-1"), moreComing: true)
                }
            }
            let feed = state.feeds[name] ?? []
            let start = token.flatMap { $0.value.split(separator: "@").last.flatMap { Int($0) } } ?? 0
            let end = min(start + pageSize, feed.count)
            let entries = feed[min(start, end)..<end].map {
                RecordEntry.record(Record(recordName: $0, recordType: "Note", recordChangeTag: "\($0)-tag"))
            }
            var page = ZoneChangePage(zoneID: zone, entries: entries, syncToken: ChangeToken("\(name)@\(end)"), moreComing: end < feed.count)
            page.byteCount = entries.count * bytesPerRecord
            return page
        }
    }
}
