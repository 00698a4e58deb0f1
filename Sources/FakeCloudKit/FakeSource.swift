import CloudKitModel
import ZoneFeed

/// The fake generator as an in-process `ChangeSource` (`source.fake`).
public struct FakeSource: ChangeSource {
    public let feed: FakeFeed

    public init(settings: FakeSettings) {
        feed = FakeFeed(settings: settings)
    }

    public func currentUser() async throws -> String? { nil }

    public var namedZones: [ZoneID]? { nil }

    public func fetchDatabaseChanges(since token: ChangeToken?) async throws -> DatabaseChangePage {
        feed.databaseChanges(since: token)
    }

    public func fetchZoneChanges(in zone: ZoneID, since token: ChangeToken?) async throws -> ZoneChangePage {
        guard let index = feed.zoneIndex(of: zone) else {
            throw SyncError(.zoneNotFound, zoneID: zone, message: "zone \(zone.zoneName) does not exist in the fake feed")
        }
        var start = 0
        if let token {
            guard let position = feed.position(of: token, zone: index) else {
                throw SyncError(.changeTokenExpired, zoneID: zone, message: "the fake feed does not know the zone's change token (CHANGE_TOKEN_EXPIRED)")
            }
            start = position
        }
        let total = feed.entriesPerZone
        let end = start >= total ? total : min(total, feed.page(containing: start).start + feed.pageSize(feed.page(containing: start).page))
        let entries = try feed.entriesWithJSONFields(zone: index, range: start..<end)
        return ZoneChangePage(zoneID: zone, entries: entries, syncToken: feed.zoneToken(zone: index, position: end), moreComing: end < total)
    }
}
