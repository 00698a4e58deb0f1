import CloudKitModel
import FakeCloudKit
import Logging
import TestSupport
import Testing
import ZoneFeed

@testable import ZoneFeedPostgres

/// Evolution makes a table for each new record type up to a limit per pipeline (500, lowered to
/// five here): a server sending records of ever new types would otherwise fill the database with
/// tables, or make more in one batch than PostgreSQL's lock table holds and fail the batch at
/// every try. The records of types past the limit are rejects that name it; the batch applies.
@Suite struct EvolvedTablesLimitTests {
    @Test func recordsOfNewTypesPastTheLimitAreRejectsAndTheBatchApplies() async throws {
        var p = try await FakePipeline(prefix: "evotables", fake: FakeSettings(zones: 1))
        p.recordTypesSection = "recordTypes: auto\n"
        p.mappedTypes = []  // no tables of the fake's types to read back
        let destination = PostgresDestination(
            pipelineName: p.name, settings: try p.pipeline().postgresSettings(), conninfo: p.url,
            logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }, limits: .init(tables: 5))
        try await destination.prepare()
        let run = try await destination.startRun()
        let zone = ZoneID(zoneName: "Zone01", ownerRecordName: "_fakeOwner")
        let checkpoint = try await destination.zoneCheckpoint(zone)
        func record(_ type: String, _ name: String) -> RecordEntry {
            .record(Record(recordName: name, recordType: type, recordChangeTag: "t1", fields: ["label": .string(name)]))
        }
        func apply(_ entries: [RecordEntry], token: String) async throws -> BatchOutcome {
            try await destination.apply(
                ChangeBatch(
                    zoneID: zone, runID: run, generation: checkpoint.generation, pageCount: 1, entries: entries,
                    from: try await destination.zoneCheckpoint(zone).token, token: ChangeToken(token), isLast: false, finishesResync: false))
        }
        // Three types, then four more in one batch, one of them twice: five tables in all.
        var outcome = try await apply([record("T1", "a"), record("T2", "b"), record("T3", "c")], token: "fk1-x-0-1")
        #expect(outcome.upserts == 3)
        outcome = try await apply(
            [record("T4", "d"), record("T5", "e"), record("T6", "f"), record("T4", "g"), record("T7", "h")], token: "fk1-x-0-2")
        #expect(outcome.upserts == 3)
        #expect(outcome.rejects == 2)
        // A type with a table still takes records; a new one still does not.
        outcome = try await apply([record("T1", "i"), record("T8", "j")], token: "fk1-x-0-3")
        #expect((outcome.upserts, outcome.rejects) == (1, 1))

        let snapshot = try await DestinationSnapshot.read(p)
        #expect(snapshot.rejects.map(\.recordName) == ["f", "h", "j"])
        #expect(
            snapshot.rejects.first?.error
                == "record type 'T6' gets no table: evolution makes none past a pipeline's 5th, and this one has 5 with those its batch "
                + "makes (a mapping written out, or a schema file, can name more)")
        #expect(snapshot.rejects.allSatisfy { $0.raw != nil }, "the records are kept whole")
        let tables = destination.schema.tables.map(\.mapping.recordType).sorted()
        #expect(tables == ["T1", "T2", "T3", "T4", "T5"])
        await destination.close()
    }
}
