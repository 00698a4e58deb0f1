import CloudKitModel
import FakeCloudKit
import LibPQ
import Logging
import TestSupport
import Testing
import ZoneFeed
import ZoneFeedPostgres

/// What happens when two processes touch one zone's checkpoint at the same time.
@Suite struct CheckpointFencingTests {
    let zone = ZoneID(zoneName: "Zone01", ownerRecordName: "_fakeOwner")

    func destination(_ p: FakePipeline) throws -> PostgresDestination {
        try PostgresDestination(pipeline: p.pipeline(), conninfo: p.url, logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() })
    }

    /// The zone's first batch, read from no token.
    func batch(runID: Int64, generation: Int, isLast: Bool, entries: [RecordEntry]? = nil) -> ChangeBatch {
        let record = Record(recordName: "R1", recordType: "Tag", recordChangeTag: "t1", fields: ["label": .string("x")])
        return ChangeBatch(
            zoneID: zone, runID: runID, generation: generation, pageCount: 1, entries: entries ?? [.record(record)],
            from: nil, token: ChangeToken("fk1-x-0-1"), isLast: isLast, finishesResync: false)
    }

    /// Two processes that both took the zone (the first's claim was lost with its connection,
    /// and the second claimed it) read the same first pages and apply the same batch, each on
    /// its own. Both would commit, each logging the batch's tombstone and counting its records:
    /// the second finds the checkpoint moved past the token it read from and applies nothing.
    @Test func aBatchTwoProcessesApplyIsCommittedOnce() async throws {
        let p = try await FakePipeline(prefix: "twice", fake: FakeSettings(zones: 1))
        let a = try destination(p)
        let b = try destination(p)
        try await a.prepare()
        try await b.prepare()
        let (runA, runB) = (try await a.startRun(), try await b.startRun())
        let (readByA, readByB) = (try await a.zoneCheckpoint(zone), try await b.zoneCheckpoint(zone))
        #expect(readByA.token == nil && readByB.token == nil, "both read the zone from the start")
        let entries: [RecordEntry] = [
            .record(Record(recordName: "R1", recordType: "Tag", recordChangeTag: "t1", fields: ["label": .string("x")])),
            .deleted(recordName: "R0"),
        ]

        let first = try await a.apply(batch(runID: runA, generation: readByA.generation, isLast: false, entries: entries))
        #expect(first.upserts == 1 && first.tombstones == 1)
        let refused = await #expect(throws: SyncError.self) {
            _ = try await b.apply(batch(runID: runB, generation: readByB.generation, isLast: false, entries: entries))
        }
        #expect(refused?.message.contains("was moved, reset, resynced or deleted") == true, "\(String(describing: refused))")

        let schema = quoteIdentifier(p.schema)
        let (tombstones, applied) = try await Connection.withConnectionOffPool(p.url) { c in
            (
                try c.query("SELECT count(*) FROM \(schema).zonefeed_tombstones").scalar(as: Int.self),
                try c.query("SELECT records_applied FROM \(schema).zonefeed_checkpoints WHERE scope = 'zone'").scalar(as: Int.self)
            )
        }
        #expect(tombstones == 1, "the deletion is logged once")
        #expect(applied == 2, "the batch's two entries are counted once")
        #expect(try await a.zoneCheckpoint(zone).token == ChangeToken("fk1-x-0-1"))
        await a.close()
        await b.close()
    }

    @Test func aBatchIsRefusedWhenTheZoneWasResyncedElsewhereMeanwhile() async throws {
        let p = try await FakePipeline(prefix: "fence", fake: FakeSettings(zones: 1))
        let a = try destination(p)
        let b = try destination(p)
        try await a.prepare()
        try await b.prepare()
        let run = try await a.startRun()
        let checkpoint = try await a.zoneCheckpoint(zone)

        _ = try await b.beginResync(zone, reason: "encrypted data reset")
        let refused = await #expect(throws: SyncError.self) {
            _ = try await a.apply(batch(runID: run, generation: checkpoint.generation, isLast: false))
        }
        #expect(refused?.code == .failed, "the zone fails; the run goes on with the others")
        let after = try await b.zoneCheckpoint(zone)
        #expect(after.token == nil && after.resyncing, "the resync begun elsewhere stands")
        #expect(try await DestinationSnapshot.read(p).rows.isEmpty, "nothing of the refused batch was applied")
        await a.close()
        await b.close()
    }

    @Test func aChangeNoticedWhileTheZoneIsBeingAppliedKeepsItPending() async throws {
        let p = try await FakePipeline(prefix: "notice", fake: FakeSettings(zones: 1))
        let a = try destination(p)
        let b = try destination(p)
        try await a.prepare()
        try await b.prepare()
        let run = try await a.startRun()
        let checkpoint = try await a.zoneCheckpoint(zone)

        // Another run reads the database feed: the zone changed again.
        let notice = DatabaseChangePage(modifiedZones: [zone], deletedZones: [], syncToken: ChangeToken("db-2"), moreComing: false)
        #expect(try await b.applyDatabaseChanges(notice, after: nil, runID: run) != nil)

        _ = try await a.apply(batch(runID: run, generation: checkpoint.generation, isLast: true))
        #expect(try await b.pendingZones() == [zone], "the zone's last batch must not clear a notice that came after it read the checkpoint")
        await a.close()
        await b.close()
    }

    @Test func aStaleDatabaseTokenStopsTheDatabaseFeedInsteadOfReplayingIt() async throws {
        let p = try await FakePipeline(prefix: "dbtoken", fake: FakeSettings(zones: 1))
        let a = try destination(p)
        try await a.prepare()
        let run = try await a.startRun()
        let first = DatabaseChangePage(modifiedZones: [zone], deletedZones: [], syncToken: ChangeToken("db-1"), moreComing: false)
        #expect(try await a.applyDatabaseChanges(first, after: nil, runID: run) != nil)
        let replay = DatabaseChangePage(
            modifiedZones: [], deletedZones: [ZoneDeletion(zoneID: zone, reason: .deleted)],
            syncToken: ChangeToken("db-1b"), moreComing: false)
        #expect(try await a.applyDatabaseChanges(replay, after: nil, runID: run) == nil)
        #expect(try await a.databaseCheckpoint() == ChangeToken("db-1"))
        await a.close()
    }
}
