import CloudKitModel
import FakeCloudKit
import Logging
import TestSupport
import Testing
import ZoneFeed

@testable import ZoneFeedPostgres

@Suite struct RejectTests {
    @Test func nulBytesAndWrongTypedValuesGoToTheRejectsTableAndTheRestApplies() async throws {
        let p = try await FakePipeline(prefix: "rejects", fake: FakeSettings(seed: 21, zones: 2, recordsPerZone: 2_000, badRecordEvery: 7))
        let summary = try await p.run()
        let expected = p.expected()
        let snapshot = try await DestinationSnapshot.read(p)

        #expect(summary.status == .succeeded)
        #expect(expected.rejects > 0)
        #expect(snapshot.rejects.count == expected.rejects)
        #expect(snapshot.rejects.contains { $0.error.contains("NUL") && $0.error.contains("title") })
        #expect(snapshot.rejects.contains { $0.error.contains("wordCount") && $0.error.contains("STRING") && $0.error.contains("bigint") })
        #expect(snapshot.rejects.allSatisfy { $0.raw?.contains("\"recordName\"") == true }, "the entry is kept as received")
        #expect(snapshot.differences(from: expected) == [])
    }

    @Test func onBadRecordFailStopsTheZoneWithoutApplyingItsBatch() async throws {
        var p = try await FakePipeline(prefix: "badfail", fake: FakeSettings(seed: 21, zones: 1, recordsPerZone: 1_000, badRecordEvery: 5))
        p.onBadRecord = "fail"
        p.commitEvery = 100_000
        let summary = try await p.run()
        #expect(summary.status == .failed)
        #expect(summary.zonesFailed.count == 1)
        #expect(summary.zonesFailed.first?.1.contains("onBadRecord") == true)
        let snapshot = try await DestinationSnapshot.read(p)
        #expect(snapshot.rows.isEmpty, "the whole batch was rolled back")
        #expect(snapshot.runStatuses == ["failed"])
    }

    /// A reject keeps the entry as the server sent it in `raw`, unless jsonb would not take it:
    /// then `raw` is null and the error says why, rather than a batch the server refuses at every
    /// try. The limit is lowered here.
    @Test func aRejectWhoseEntryJSONBWouldNotTakeIsKeptWithoutIt() async throws {
        let p = try await FakePipeline(prefix: "rejectraw", fake: FakeSettings(zones: 1))
        let destination = PostgresDestination(
            pipelineName: p.name, settings: try p.pipeline().postgresSettings(), conninfo: p.url,
            logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() },
            limits: .init(rejectsJSONB: JSONBLimits(maxBytes: 100_000, maxListElements: 50, maxObjectMembers: 50)))
        try await destination.prepare()
        let run = try await destination.startRun()
        let zone = ZoneID(zoneName: "Zone01", ownerRecordName: "_fakeOwner")
        let checkpoint = try await destination.zoneCheckpoint(zone)
        // Notes whose wordCount is text, one with a list too long for the lowered limit.
        func note(_ name: String, counts: Int) -> RecordEntry {
            .record(
                Record(
                    recordName: name, recordType: "Note", recordChangeTag: "t1",
                    fields: ["wordCount": .string("many"), "counts": .list(tag: "INT64_LIST", Array(repeating: .int64(0), count: counts))]))
        }
        let outcome = try await destination.apply(
            ChangeBatch(
                zoneID: zone, runID: run, generation: checkpoint.generation, pageCount: 1,
                entries: [note("SHORT", counts: 50), note("LONG", counts: 51), .record(Record(recordName: "FINE", recordType: "Tag", fields: [:]))],
                token: ChangeToken("fk1-x-0-1"), isLast: true, finishesResync: false))
        #expect(outcome.rejects == 2)
        #expect(outcome.upserts == 1, "the batch is applied")
        let rejects = try await DestinationSnapshot.read(p).rejects
        #expect(rejects.map(\.recordName) == ["SHORT", "LONG"])
        #expect(rejects[0].raw?.contains(#""recordName": "SHORT""#) == true, "\(rejects[0].raw ?? "null")")
        #expect(rejects[1].raw == nil)
        #expect(rejects[0].error.hasPrefix("field wordCount"), "\(rejects[0].error)")
        #expect(
            rejects[1].error
                == rejects[0].error
                + "; the entry is not kept in raw: the JSON holds a list of more than 50 elements, more than PostgreSQL's jsonb takes")
        await destination.close()
    }
}
