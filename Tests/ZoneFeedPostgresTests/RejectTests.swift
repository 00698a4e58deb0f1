import CloudKitModel
import FakeCloudKit
import LibPQ
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

    /// A batch that holds a record twice, its last version one that does not fit: the last
    /// version wins, as a reject, and the row is left as it was before the batch. Before, the
    /// batch's earlier version was merged in its stead: a version the record no longer is. A
    /// version before a deletion is still the row that deletion ends, and one after the refused
    /// version still wins; every version counts among the batch's changes.
    @Test func aLastVersionThatDoesNotFitLeavesTheRowAsItWasNotAtAnEarlierVersion() async throws {
        let p = try await FakePipeline(prefix: "lastbad", fake: FakeSettings(zones: 1))
        let destination = try p.destination()
        try await destination.prepare()
        let run = try await destination.startRun()
        let zone = ZoneID(zoneName: "Zone01", ownerRecordName: "_fakeOwner")
        let checkpoint = try await destination.zoneCheckpoint(zone)
        func note(_ name: String, _ tag: String, wordCount: FieldValue) -> RecordEntry {
            .record(Record(recordName: name, recordType: "Note", recordChangeTag: tag, fields: ["title": .string(name), "wordCount": wordCount]))
        }
        func batch(_ entries: [RecordEntry], from: String?, to token: String) -> ChangeBatch {
            ChangeBatch(
                zoneID: zone, runID: run, generation: checkpoint.generation, pageCount: 1, entries: entries,
                from: from.map(ChangeToken.init), token: ChangeToken(token), isLast: true, finishesResync: false)
        }
        _ = try await destination.apply(batch([note("KEPT", "t0", wordCount: .int64(1))], from: checkpoint.token?.value, to: "fk1-x-0-1"))

        let outcome = try await destination.apply(
            batch(
                [
                    note("KEPT", "t1", wordCount: .int64(2)), note("KEPT", "t2", wordCount: .string("many")),
                    note("NEW", "t1", wordCount: .int64(3)), note("NEW", "t2", wordCount: .string("many")),
                    note("FINE", "t1", wordCount: .string("many")), note("FINE", "t2", wordCount: .int64(4)),
                    note("GONE", "t1", wordCount: .int64(5)), .deleted(recordName: "GONE"), note("GONE", "t2", wordCount: .string("many")),
                    note("THIRD", "t1", wordCount: .int64(6)), note("THIRD", "t2", wordCount: .string("many")),
                    note("THIRD", "t3", wordCount: .int64(7)),
                ], from: "fk1-x-0-1", to: "fk1-x-0-2"))
        await destination.close()

        let snapshot = try await DestinationSnapshot.read(p)
        let rows = snapshot.rows.map { "\($0.key.recordName) \($0.value)" }.sorted()
        #expect(
            rows == ["FINE Note t2", "GONE Note t1 deleted", "KEPT Note t0", "THIRD Note t3"],
            "KEPT as before the batch, NEW not made, FINE and THIRD at their last versions, GONE made and deleted")
        #expect(snapshot.rejects.map { "\($0.recordName ?? "-")" }.sorted() == ["FINE", "GONE", "KEPT", "NEW", "THIRD"])
        #expect(outcome.upserts == 6 && outcome.rejects == 5 && outcome.tombstones == 1, "\(outcome)")
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
                from: checkpoint.token, token: ChangeToken("fk1-x-0-1"), isLast: true, finishesResync: false))
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

    /// A NUL in any part of a value that is written back as JSON (a reference's action or its
    /// zone's type, a field's type tag) is a reject: jsonb refused the whole COPY, and the batch
    /// came back on every run, its zone stuck for ever. With `recordTypes: auto` a new field's
    /// tag would also have been its new column's type, in a parameter no query takes; a
    /// reference's column holds its record's name alone, and takes the others.
    @Test(arguments: ["written", "auto"])
    func aNULAnywhereInAValueKeptAsJSONIsARejectNotABatchRefusedForEver(_ mapping: String) async throws {
        var p = try await FakePipeline(prefix: "rejectnul\(mapping)", fake: FakeSettings(zones: 1))
        if mapping == "auto" { p.recordTypesSection = "recordTypes: auto\n" }
        let (destination, run, zone, checkpoint) = try await Self.firstBatchOfZone01(p)
        func note(_ name: String, _ field: String, _ value: FieldValue) -> RecordEntry {
            .record(Record(recordName: name, recordType: "Note", recordChangeTag: "t1", fields: ["title": .string(name), field: value]))
        }
        let outcome = try await destination.apply(
            ChangeBatch(
                zoneID: zone, runID: run, generation: checkpoint.generation, pageCount: 1,
                entries: [
                    note("FINE", "link", .reference(Reference(recordName: "r"))),
                    note("ACTION", "link", .reference(Reference(recordName: "r", action: "\u{0}"))),
                    note("ZONETYPE", "link", .reference(Reference(recordName: "r", zoneID: ZoneID(zoneName: "z", zoneType: "\u{0}")))),
                    note("TAG", "odd", .unknown(tag: "X\u{0}", .int(1))),
                    note("LISTTAG", "odds", .list(tag: "X\u{0}_LIST", [.int64(1)])),
                ],
                from: checkpoint.token, token: ChangeToken("fk1-x-0-1"), isLast: true, finishesResync: false))
        let rejects = try Connection.withConnection(p.url) { c in
            try c.query("SELECT record_name, error FROM \(quoteIdentifier(p.schema)).zonefeed_rejects ORDER BY record_name").rows.map {
                (try $0.decode(0, as: String.self), try $0.decode(1, as: String.self))
            }
        }
        let rejected = mapping == "auto" ? ["LISTTAG", "TAG"] : ["ACTION", "LISTTAG", "TAG", "ZONETYPE"]
        #expect(rejects.map(\.0) == rejected)
        #expect(rejects.allSatisfy { $0.1.contains("contains a NUL byte, which PostgreSQL jsonb cannot hold") }, "\(rejects)")
        #expect(outcome.rejects == rejected.count)
        #expect(outcome.upserts == 5 - rejected.count, "the batch is applied")
        await destination.close()
    }

    /// A NUL in a record's name, change tag, stamps' user names or a reference kept in a text
    /// column is a reject with its part named, and the row begun for it is taken back: the
    /// records after it are written whole.
    @Test func aNULInARecordsTextColumnsIsARejectAndTheRowsAfterItAreWhole() async throws {
        let p = try await FakePipeline(prefix: "rejectnulmeta", fake: FakeSettings(zones: 1))
        let (destination, run, zone, checkpoint) = try await Self.firstBatchOfZone01(p)
        func note(_ name: String, tag: String = "t1", creator: String = "_c", modifier: String = "_m", folder: String = "F") -> RecordEntry {
            .record(
                Record(
                    recordName: name, recordType: "Note", recordChangeTag: tag,
                    fields: ["title": .string("title of \(name.count)"), "folder": .reference(Reference(recordName: folder))],
                    created: RecordStamp(timestamp: 1, userRecordName: creator), modified: RecordStamp(timestamp: 2, userRecordName: modifier)))
        }
        let outcome = try await destination.apply(
            ChangeBatch(
                zoneID: zone, runID: run, generation: checkpoint.generation, pageCount: 1,
                entries: [
                    note("FIRST"), note("NA\u{0}ME"), note("TAG", tag: "t\u{0}"), note("CREATOR", creator: "_c\u{0}"),
                    note("MODIFIER", modifier: "_m\u{0}"), note("FOLDER", folder: "F\u{0}"), note("LAST"),
                ],
                from: checkpoint.token, token: ChangeToken("fk1-x-0-1"), isLast: true, finishesResync: false))
        let (rejects, rows) = try Connection.withConnection(p.url) { c in
            let rejects = try c.query("SELECT record_name, error FROM \(quoteIdentifier(p.schema)).zonefeed_rejects").rows.map {
                (try $0.decode(0, as: String.self), try $0.decode(1, as: String.self))
            }
            let rows = try c.query("SELECT record_name, title, created_by, modified_by, folder FROM \(quoteIdentifier(p.schema)).notes ORDER BY 1")
                .rows.map { row in try (0..<5).map { try row.decode($0, as: String.self) } }
            return (Dictionary(uniqueKeysWithValues: rejects), rows)
        }
        let text = "contains a NUL byte, which PostgreSQL text cannot hold"
        #expect(rejects.count == 5, "\(rejects)")
        #expect(rejects["NA\\u0000ME"]?.contains("the record name \(text)") == true, "\(rejects)")
        #expect(rejects["TAG"]?.contains("recordChangeTag \(text)") == true, "\(rejects)")
        #expect(rejects["CREATOR"]?.contains("created.userRecordName \(text)") == true, "\(rejects)")
        #expect(rejects["MODIFIER"]?.contains("modified.userRecordName \(text)") == true, "\(rejects)")
        #expect(rejects["FOLDER"]?.contains("field folder: the reference contains a NUL byte") == true, "\(rejects)")
        #expect(rows == [["FIRST", "title of 5", "_c", "_m", "F"], ["LAST", "title of 4", "_c", "_m", "F"]])
        #expect(outcome.rejects == 5 && outcome.upserts == 2)
        await destination.close()
    }

    /// `p`'s destination, prepared, with a run started and the checkpoint of the fake's first
    /// zone, for a test that applies a batch of its own.
    static func firstBatchOfZone01(_ p: FakePipeline) async throws -> (PostgresDestination, Int64, ZoneID, ZoneCheckpoint) {
        let destination = PostgresDestination(
            pipelineName: p.name, settings: try p.pipeline().postgresSettings(), conninfo: p.url,
            logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() })
        try await destination.prepare()
        let run = try await destination.startRun()
        let zone = ZoneID(zoneName: "Zone01", ownerRecordName: "_fakeOwner")
        return (destination, run, zone, try await destination.zoneCheckpoint(zone))
    }
}
