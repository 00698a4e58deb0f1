import FakeCloudKit
import TestSupport
import Testing
import ZoneFeed

@Suite struct ZoneDeletionTests {
    @Test func aZoneDeletedAtTheSourceIsTombstonedAndForgotten() async throws {
        var p = try await FakePipeline(prefix: "zonedel", fake: FakeSettings(seed: 23, zones: 3, recordsPerZone: 600))
        try await p.run()
        let before = try await DestinationSnapshot.read(p)
        let zone3Live = before.rows.filter { $0.key.zoneName == "Zone03" && !$0.value.deleted }.count

        p.fake.zones = 2
        let summary = try await p.run()
        let after = try await DestinationSnapshot.read(p)

        #expect(summary.zonesDeleted.map(\.zoneID.zoneName) == ["Zone03"])
        #expect(after.tombstonesByReason["zone_deleted"] == zone3Live)
        #expect(after.rows.filter { $0.key.zoneName == "Zone03" }.allSatisfy { $0.value.deleted })
        #expect(after.rows.filter { $0.key.zoneName != "Zone03" } == before.rows.filter { $0.key.zoneName != "Zone03" })
    }
}
