import CloudKitModel
import FakeCloudKit
import LibPQ
import TestSupport
import Testing
import ZoneFeed
import ZoneFeedPostgres

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

    /// Another run's last batch of a zone has written a row and moved the zone's token, and not
    /// yet committed, when this run's database feed reports the zone deleted. The deletion waits
    /// for that batch, and its row is tombstoned with the others; it stayed live before, in a
    /// zone with no checkpoint left to bring it back. (The test's own transaction stands for the
    /// other run's batch.)
    @Test func aZoneDeletedWhileAnotherRunCommitsItsLastBatchLeavesNoRowLive() async throws {
        let p = try await FakePipeline(prefix: "zonedelrace", fake: FakeSettings(seed: 29, zones: 1, recordsPerZone: 50))
        try await p.run()
        let zone = ZoneID(zoneName: "Zone01", ownerRecordName: p.fake.owner)
        let schema = quoteIdentifier(p.schema)
        let hold = try CheckpointHold(p)
        defer { hold.close() }
        try await hold.door.offPool { c in
            try c.execute("BEGIN")
            try c.query(
                "INSERT INTO \(schema).tags (zone_owner, zone_name, record_name, record_type, run_id, generation) VALUES ($1, $2, 'LATE', 'Tag', 1, 0)",
                [zone.ownerRecordName, zone.zoneName])
            try c.query("UPDATE \(schema).zonefeed_checkpoints SET updated_at = now() WHERE scope = 'zone' AND zone_name = $1", [zone.zoneName])
        }

        let destination = try p.destination()
        try await destination.prepare()
        let run = try await destination.startRun()
        let previous = try await destination.databaseCheckpoint()
        let page = DatabaseChangePage(
            modifiedZones: [], deletedZones: [ZoneDeletion(zoneID: zone, reason: .deleted)], syncToken: ChangeToken("db-after"), moreComing: false)
        let deleting = Task { try await destination.applyDatabaseChanges(page, after: previous, runID: run) }
        let waits = try await hold.waitUntil { !$0.isEmpty }
        #expect(!waits.isEmpty, "the deletion waits for the other transaction")
        try await hold.door.offPool { c in _ = try c.execute("COMMIT") }
        _ = try await deleting.value
        await destination.close()

        let live = try await Connection.withConnectionOffPool(p.url) { c in
            try c.query("SELECT count(*) FROM \(schema).tags WHERE zone_name = $1 AND deleted_at IS NULL", [zone.zoneName]).scalar(as: Int.self)
        }
        #expect(live == 0, "every row of the deleted zone is tombstoned, the one committed meanwhile too")
        let late = try await Connection.withConnectionOffPool(p.url) { c in
            try c.query("SELECT count(*) FROM \(schema).zonefeed_tombstones WHERE record_name = 'LATE' AND reason = 'zone_deleted'").scalar(as: Int.self)
        }
        #expect(late == 1)
    }
}
