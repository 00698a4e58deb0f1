import CloudKitModel
import FakeCloudKit
import Logging
import TestSupport
import Testing
import ZoneFeed

@testable import ZoneFeedPostgres

/// A reject keeps the entry as the server sent it in `raw`, unless jsonb would not take it: then
/// `raw` is null and the error says why, rather than a batch the server refuses at every try.
/// The limit is lowered here.
@Suite struct RejectEntryTests {
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
