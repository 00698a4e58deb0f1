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
        let schema = quoteIdentifier(p.schema)
        let live = try await Self.deleteZone(of: p, whileABatchCommits: "tags") { c, zone in
            try c.query(
                "INSERT INTO \(schema).tags (zone_owner, zone_name, record_name, record_type, run_id, generation) VALUES ($1, $2, 'LATE', 'Tag', 1, 0)",
                [zone.ownerRecordName, zone.zoneName])
        }
        #expect(live == 0, "every row of the deleted zone is tombstoned, the one committed meanwhile too")
    }

    /// The same on a database whose sessions default to SERIALIZABLE (`ALTER DATABASE … SET
    /// default_transaction_isolation`, here the connection's own options): zonefeed's sessions
    /// read committed whatever the default, and the deletion goes through. It failed with 40001
    /// before (its snapshot could not take the other run's commit), and the zone with it.
    @Test func aZoneDeletedWhileAnotherRunCommitsOnADatabaseThatDefaultsToSerializableLeavesNoRowLive() async throws {
        var p = try await FakePipeline(prefix: "zonedelserial", fake: FakeSettings(seed: 31, zones: 1, recordsPerZone: 50))
        let options = "-c default_transaction_isolation=serializable"
        p.url +=
            p.url.hasPrefix("postgres")
            ? (p.url.contains("?") ? "&" : "?") + "options=" + options.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            : " options='\(options)'"
        try await p.run()
        let schema = quoteIdentifier(p.schema)
        let live = try await Self.deleteZone(of: p, whileABatchCommits: "tags") { c, zone in
            #expect(try c.query("SHOW transaction_isolation").scalar == "serializable", "the database's default, as the test's own session sees it")
            try c.query(
                "INSERT INTO \(schema).tags (zone_owner, zone_name, record_name, record_type, run_id, generation) VALUES ($1, $2, 'LATE', 'Tag', 1, 0)",
                [zone.ownerRecordName, zone.zoneName])
        }
        #expect(live == 0)
    }

    /// The same, where the other run's batch brought a new record type, and evolution made its
    /// table in that batch: the deletion's second pass reads the tables again, and the new
    /// table's row is tombstoned too. It read the tables once before, and that row stayed live.
    @Test func aZoneDeletedWhileAnotherRunMakesATableForItLeavesNoRowLiveThere() async throws {
        var p = try await FakePipeline(prefix: "zonedelnewtable", fake: FakeSettings(seed: 30, zones: 1, recordsPerZone: 50))
        p.recordTypesSection = "recordTypes: auto\n"
        p.tables = ["Note": "note", "Folder": "folder", "Tag": "tag"]
        try await p.run()
        let (schema, name) = (quoteIdentifier(p.schema), p.name)
        let live = try await Self.deleteZone(of: p, whileABatchCommits: "late") { c, zone in
            // What evolution does in a batch: the table, its record of the change, then the row.
            try c.execute("CREATE TABLE \(schema).late (LIKE \(schema).tag INCLUDING ALL)")
            try c.query(
                """
                INSERT INTO \(schema).zonefeed_schema_changes (id, pipeline, run_id, change, record_type, table_name, why)
                SELECT coalesce(max(id), 0) + 1, $1, 1, 'table_created', 'Late', 'late', 'record type Late first seen' FROM \(schema).zonefeed_schema_changes
                """, [name])
            try c.query(
                "INSERT INTO \(schema).late (zone_owner, zone_name, record_name, record_type, run_id, generation) VALUES ($1, $2, 'LATE', 'Late', 1, 0)",
                [zone.ownerRecordName, zone.zoneName])
        }
        #expect(live == 0, "the row in the table made meanwhile is tombstoned too")
    }

    /// Deletes the pipeline's one zone while the test's own transaction, standing for another
    /// run's batch, has done `batch` and moved the zone's checkpoint; commits it once the deletion
    /// waits for it. Returns how many rows of the zone are still live in `table`, checking that the
    /// late row's deletion was logged once.
    static func deleteZone(
        of p: FakePipeline, whileABatchCommits table: String, _ batch: @escaping @Sendable (Connection, ZoneID) throws -> Void
    ) async throws -> Int {
        let zone = ZoneID(zoneName: "Zone01", ownerRecordName: p.fake.owner)
        let schema = quoteIdentifier(p.schema)
        let hold = try CheckpointHold(p)
        defer { hold.close() }
        try await hold.door.offPool { c in
            try c.execute("BEGIN")
            try batch(c, zone)
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

        let late = try await Connection.withConnectionOffPool(p.url) { c in
            try c.query("SELECT count(*) FROM \(schema).zonefeed_tombstones WHERE record_name = 'LATE' AND reason = 'zone_deleted'").scalar(as: Int.self)
        }
        #expect(late == 1)
        return try await Connection.withConnectionOffPool(p.url) { c in
            try c.query("SELECT count(*) FROM \(schema).\(quoteIdentifier(table)) WHERE zone_name = $1 AND deleted_at IS NULL", [zone.zoneName])
                .scalar(as: Int.self)
        }
    }

    /// A run finds the zone it holds gone (`ZONE_NOT_FOUND`); meanwhile the zone was made again
    /// and another process, reading the database feed, marked it pending (the checkpoint's
    /// pending_seq moved; a checkpoint made anew has another incarnation too). The first run's
    /// deletion tombstones the old rows but keeps that mark, with no token: dropped with the
    /// checkpoint, the new zone was read by no run until it changed again, and every run
    /// succeeded.
    @Test func aZoneFoundGoneKeepsTheMarkAnotherProcessGaveItsMakingAgain() async throws {
        let p = try await FakePipeline(prefix: "zonegoneagain", fake: FakeSettings(seed: 29, zones: 1, recordsPerZone: 50))
        let zone = ZoneID(zoneName: "Zone01", ownerRecordName: "_fakeOwner")
        let (holding, reading) = (try p.destination(), try p.destination())
        try await holding.prepare()
        try await reading.prepare()
        let run = try await holding.startRun()
        #expect(try await holding.claimZone(zone))
        let checkpoint = try await holding.zoneCheckpoint(zone)
        _ = try await holding.apply(
            ChangeBatch(
                zoneID: zone, runID: run, generation: checkpoint.generation, pageCount: 1,
                entries: [.record(Record(recordName: "OLD", recordType: "Tag", recordChangeTag: "t1", fields: ["label": .string("x")]))],
                from: checkpoint.token, token: ChangeToken("old-zone-1"), isLast: true, finishesResync: false))

        let otherRun = try await reading.startRun()
        let made = DatabaseChangePage(modifiedZones: [zone], deletedZones: [], syncToken: ChangeToken("db-1"), moreComing: false)
        #expect(try await reading.applyDatabaseChanges(made, after: try await reading.databaseCheckpoint(), runID: otherRun) != nil)

        _ = try await holding.deleteZone(ZoneDeletion(zoneID: zone, reason: .deleted), runID: run)
        try await holding.releaseZone(zone)
        #expect(try await reading.pendingZones().contains(zone), "the zone made again is read by the next run")
        let row = try await Connection.withConnectionOffPool(p.url) { c in
            try c.query(
                "SELECT token IS NULL, pending FROM \(quoteIdentifier(p.schema)).zonefeed_checkpoints WHERE scope = 'zone' AND zone_name = 'Zone01'"
            ).rows.first.map { [$0[0], $0[1]] }
        }
        #expect(row == ["t", "t"], "kept, from no token: \(String(describing: row))")
        let old = try await DestinationSnapshot.read(p).rows[ExpectedState.Key(zoneName: "Zone01", recordName: "OLD")]
        #expect(old?.deleted == true, "the old zone's row is tombstoned: \(String(describing: old))")
        await holding.close()
        await reading.close()
    }

    /// A run applies a zone while another run's database feed reports it deleted and made
    /// again (apps reset a zone so). The zone's checkpoint row is dropped and made anew, with
    /// generation 1 again, as the old one's was, and with no token, as the old one's had before
    /// the first run's first batch: that batch, read from the zone before it was deleted,
    /// passed both fences, committed into the new zone's checkpoint (cleared its pending too, so
    /// the new zone was never fetched), and left its row live. Only the checkpoint's incarnation
    /// tells the two apart.
    @Test func aBatchReadBeforeItsZoneWasDeletedAndMadeAgainCommitsNothing() async throws {
        let p = try await FakePipeline(prefix: "zoneagain", fake: FakeSettings(seed: 31, zones: 1, recordsPerZone: 1))
        let zone = ZoneID(zoneName: "Notes", ownerRecordName: "_owner")
        let (applying, reading) = (try p.destination(), try p.destination())
        try await applying.prepare()
        try await reading.prepare()
        let (run, otherRun) = (try await applying.startRun(), try await reading.startRun())
        func feed(_ deleted: [ZoneDeletion], _ token: String, after: String?) async throws {
            let page = DatabaseChangePage(modifiedZones: [zone], deletedZones: deleted, syncToken: ChangeToken(token), moreComing: false)
            _ = try await reading.applyDatabaseChanges(page, after: after.map(ChangeToken.init), runID: otherRun)
        }
        try await feed([], "db-1", after: nil)
        #expect(try await applying.claimZone(zone))
        let read = try await applying.zoneCheckpoint(zone)
        #expect(read.generation == 1 && read.token == nil)
        try await feed([ZoneDeletion(zoneID: zone, reason: .deleted)], "db-2", after: "db-1")

        // The zone's first batch, read from no token in generation 1: what the new checkpoint holds.
        let tag = Record(recordName: "OLD", recordType: "Tag", recordChangeTag: "t-old", fields: ["label": .string("OLD")])
        let first = ChangeBatch(
            zoneID: zone, runID: run, generation: 1, pageCount: 1, entries: [.record(tag)], from: nil, token: ChangeToken("old-1"),
            isLast: true, finishesResync: false)
        await #expect(throws: SyncError.self) { try await applying.apply(first) }
        await applying.close()
        await reading.close()
        let schema = quoteIdentifier(p.schema)
        let (checkpoint, live) = try await Connection.withConnectionOffPool(p.url) { c in
            let row = try c.query("SELECT coalesce(token, '-'), pending FROM \(schema).zonefeed_checkpoints WHERE scope = 'zone'").rows[0]
            let live = try c.query("SELECT record_name FROM \(schema).tags WHERE deleted_at IS NULL").rows.compactMap { $0[0] }
            return ("\(row[0] ?? "") \(row[1] ?? "")", live)
        }
        #expect(checkpoint == "- t", "the new zone's checkpoint is untouched and still pending")
        #expect(live == [], "no row of the deleted zone is live")
    }
}
