import FakeCloudKit
import TestSupport
import Testing
import ZoneFeed

@Suite struct BackfillTests {
    @Test func backfillFromNilTokensReachesTheGeneratorsExpectedState() async throws {
        let p = try await FakePipeline(prefix: "backfill", fake: FakeSettings(seed: 7, zones: 3, recordsPerZone: 2_500))
        let summary = try await p.run()
        let expected = p.expected()

        #expect(summary.status == .succeeded)
        let snapshot = try await DestinationSnapshot.read(p)
        #expect(snapshot.differences(from: expected) == [])
        #expect(expected.deletedCount > 0, "the feed holds deletions")
        #expect(snapshot.runUpserts == expected.upserts)
        #expect(snapshot.runTombstones == expected.tombstones)
        #expect(snapshot.runPages == expected.pages)
        #expect(snapshot.tombstonesByReason == ["deleted": expected.tombstones])
    }

    /// Zones applied at once, each on its own connection, give the same rows and counts as zones
    /// applied one after another, and do overlap.
    @Test(arguments: [1, 3])
    func zonesAppliedInParallelReachTheSameState(parallelZones: Int) async throws {
        var p = try await FakePipeline(prefix: "parallel\(parallelZones)", fake: FakeSettings(seed: 21, zones: 5, recordsPerZone: 1_200, pageSize: 100))
        p.commitEvery = 300
        p.parallelZones = parallelZones
        let events = EventLog()
        let summary = try await p.run(events: { await events.append($0) })
        let expected = p.expected()

        #expect(summary.status == .succeeded)
        #expect(summary.zonesApplied.map(\.zoneName) == ["Zone01", "Zone02", "Zone03", "Zone04", "Zone05"])
        let snapshot = try await DestinationSnapshot.read(p)
        #expect(snapshot.differences(from: expected) == [])
        #expect(snapshot.runUpserts == expected.upserts)
        #expect(snapshot.runTombstones == expected.tombstones)
        #expect(snapshot.runPages == expected.pages)
        // With several zones at once, a zone starts before the one before it has finished.
        #expect(await events.mostZonesOpenAtOnce == parallelZones)
    }

    /// Without churn every batch of the backfill is copied straight into the tables; with it,
    /// records that come again (in the same batch or a later one) send batches through the
    /// staging tables and the merge. Both give every value in its typed column.
    @Test(arguments: [true, false])
    func everyFieldTypeLandsInItsTypedColumn(churn: Bool) async throws {
        let p = try await FakePipeline(prefix: "columns", fake: FakeSettings(seed: 11, zones: 1, recordsPerZone: 3_000, churn: churn))
        try await p.run()
        #expect(try await NoteColumns.differences(p, expected: p.expected()) == [])
    }

    /// A zone that already has rows (here: a reset zone refetched by a new session, and a
    /// feed that repeats records across batches) is merged, never copied over its rows.
    @Test func aBackfillOverExistingRowsMergesIntoThem() async throws {
        var p = try await FakePipeline(prefix: "overexisting", fake: FakeSettings(seed: 12, zones: 2, recordsPerZone: 1_000, pageSize: 100, churn: false))
        p.commitEvery = 300
        try await p.run()
        try await p.reset(all: true)
        let again = try await p.run()
        #expect(again.status == .succeeded)
        #expect(again.totals.upserts == 2_000, "every record was fetched again")
        let snapshot = try await DestinationSnapshot.read(p)
        #expect(snapshot.differences(from: p.expected()) == [])
        #expect(snapshot.rows.count == 2_000)
    }

    @Test func incrementalRunAppliesOnlyWhatCameAfterTheStoredTokens() async throws {
        var p = try await FakePipeline(prefix: "incremental", fake: FakeSettings(seed: 3, zones: 2, recordsPerZone: 1_500))
        try await p.run()
        p.fake.recordsPerZone = 2_600
        let second = try await p.run()
        let again = try await p.run()

        let expected = p.expected()
        let snapshot = try await DestinationSnapshot.read(p)
        #expect(snapshot.differences(from: expected) == [])
        #expect(second.totals.records == 2 * (2_600 - 1_500), "the second run reads only the new entries")
        #expect(again.totals.records == 0)
        #expect(again.zonesApplied.isEmpty, "the database feed reported no changed zone")
        // Pages are not compared: the feed grew in the middle of a page, which then came in two.
        #expect(snapshot.runUpserts == expected.upserts)
        #expect(snapshot.runTombstones == expected.tombstones)
    }

    @Test func hardDeletesRemoveRowsButStillLogTheDeletions() async throws {
        var p = try await FakePipeline(prefix: "hard", fake: FakeSettings(seed: 5, zones: 2, recordsPerZone: 2_000))
        p.deletes = "hard"
        try await p.run()
        let expected = p.expected()
        let snapshot = try await DestinationSnapshot.read(p)
        #expect(snapshot.differences(from: expected) == [])
        #expect(!snapshot.rows.values.contains { $0.deleted })
        #expect(snapshot.tombstonesByReason["deleted"] == expected.tombstones)
    }

    @Test func smallTransactionsGiveTheSameResultAsLargeOnes() async throws {
        var p = try await FakePipeline(prefix: "commitevery", fake: FakeSettings(seed: 9, zones: 1, recordsPerZone: 1_200, pageSize: 50))
        p.commitEvery = 1
        let summary = try await p.run()
        #expect(try await DestinationSnapshot.read(p).differences(from: p.expected()) == [])
        #expect(summary.totals.pages == p.expected().pages)
    }

    @Test func unmappedRecordTypesAreSkippedAndCounted() async throws {
        var p = try await FakePipeline(prefix: "skip", fake: FakeSettings(seed: 2, zones: 1, recordsPerZone: 1_000))
        p.mappedTypes = ["Note"]
        let summary = try await p.run()
        let expected = p.expected()
        #expect(expected.skipped > 0)
        #expect(summary.totals.skipped == expected.skipped)
        #expect(try await DestinationSnapshot.read(p).differences(from: expected) == [])
    }
}

/// The zones a run has started and not yet finished, as its events tell.
private actor EventLog {
    private var open: Set<String> = []
    private(set) var mostZonesOpenAtOnce = 0

    func append(_ event: SyncEvent) {
        switch event {
        case .willFetchRecordZoneChanges(let zone, _):
            open.insert(zone.zoneName)
            mostZonesOpenAtOnce = max(mostZonesOpenAtOnce, open.count)
        case .didFetchRecordZoneChanges(let zone, _):
            open.remove(zone.zoneName)
        default:
            break
        }
    }
}
