import CloudKitModel
import FakeCloudKit
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

    func batch(runID: Int64, generation: Int, isLast: Bool) -> ChangeBatch {
        let record = Record(recordName: "R1", recordType: "Tag", recordChangeTag: "t1", fields: ["label": .string("x")])
        return ChangeBatch(
            zoneID: zone, runID: runID, generation: generation, pageCount: 1, entries: [.record(record)],
            token: ChangeToken("fk1-x-0-1"), isLast: isLast, finishesResync: false)
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
