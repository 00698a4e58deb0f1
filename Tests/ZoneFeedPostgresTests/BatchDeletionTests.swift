import CloudKitModel
import FakeCloudKit
import LibPQ
import Logging
import Synchronization
import TestSupport
import Testing
import ZoneFeed

@testable import ZoneFeedPostgres

/// A batch's deletions, each against the entries around it in the same batch: the last entry of
/// a name decides whether its row is deleted, and its tombstone names the type of its last
/// upsert that was applied, or else of its row.
@Suite struct BatchDeletionTests {
    let zone = ZoneID(zoneName: "Zone01", ownerRecordName: "_fakeOwner")

    func tag(_ name: String, _ changeTag: String) -> RecordEntry {
        .record(Record(recordName: name, recordType: "Tag", recordChangeTag: changeTag, fields: ["label": .string(name)]))
    }

    /// A prepared destination with a run begun, and how to make a batch of the zone in it.
    func start(
        _ prefix: String, deletes: String = "tombstone", limits: PostgresDestination.Limits = .init()
    ) async throws -> (FakePipeline, PostgresDestination, (_ entries: [RecordEntry], _ token: String, _ isLast: Bool) -> ChangeBatch) {
        var p = try await FakePipeline(prefix: prefix, fake: FakeSettings(zones: 1))
        p.deletes = deletes
        let destination = try p.destination(limits: limits)
        try await destination.prepare()
        return (p, destination, try await batches(of: destination))
    }

    @Test func eachDeletionIsDecidedByItsNamesLastEntryAndTypedByItsLastAppliedUpsert() async throws {
        let (p, destination, batch) = try await start("batchdel")
        _ = try await destination.apply(batch([tag("OLD", "t1"), tag("KEPT", "t1")], "fk1-x-0-1", false))

        // A Note whose wordCount is text: rejected, so its type must not name the tombstone.
        let rejected = Record(recordName: "BAD", recordType: "Note", recordChangeTag: "t1", fields: ["wordCount": .string("many")])
        _ = try await destination.apply(
            batch(
                [
                    .deleted(recordName: "OLD"),  // a row from before: typed by the row
                    tag("FLIP", "t1"), .deleted(recordName: "FLIP"),  // made, then deleted
                    .deleted(recordName: "BACK"), tag("BACK", "t2"),  // deleted, then made again
                    .deleted(recordName: "NEVER"),  // no row, no upsert
                    .record(rejected), .deleted(recordName: "BAD"),
                    tag("TWICE", "t1"), .deleted(recordName: "TWICE"), tag("TWICE", "t2"), .deleted(recordName: "TWICE"),
                ], "fk1-x-0-2", true))

        let snapshot = try await DestinationSnapshot.read(p)
        let live = snapshot.rows.filter { !$0.value.deleted }.map(\.key.recordName).sorted()
        let deleted = snapshot.rows.filter { $0.value.deleted }.map(\.key.recordName).sorted()
        #expect(live == ["BACK", "KEPT"])
        #expect(deleted == ["FLIP", "OLD", "TWICE"])
        let tombstones = try await Connection.withConnectionOffPool(p.url) { c in
            try c.query("SELECT record_name, record_type FROM \(quoteIdentifier(p.schema)).zonefeed_tombstones ORDER BY id").rows
                .map { "\($0[0]!) \($0[1] ?? "-")" }
        }
        // Every deletion is logged, in the batch's order.
        #expect(tombstones == ["OLD Tag", "FLIP Tag", "BACK Tag", "NEVER -", "BAD -", "TWICE Tag", "TWICE Tag"])
        #expect(snapshot.rejects.map(\.recordName) == ["BAD"])
        await destination.close()
    }

    /// `café` with a composed é and `cafe` with a combining accent are one String to Swift and two
    /// records to CloudKit and to their rows: a deletion of one leaves the other as it was, and
    /// deleting both deletes both. Compared as Strings, the second deletion of a batch was taken
    /// for a repeat of the first and left its row live.
    @Test func namesThatDifferOnlyInTheirBytesAreDeletedEachOnItsOwn() async throws {
        let (p, destination, batch) = try await start("bytedel")
        let (composed, decomposed) = ("caf\u{E9}", "cafe\u{301}")
        let (other, otherDecomposed) = ("r\u{E9}sum\u{E9}", "re\u{301}sume\u{301}")
        #expect(composed == decomposed && Array(composed.utf8) != Array(decomposed.utf8), "one String, two names")
        _ = try await destination.apply(
            batch([tag(composed, "t1"), tag(decomposed, "t1"), tag(other, "t1"), tag(otherDecomposed, "t1")], "fk1-x-0-1", false))
        _ = try await destination.apply(
            batch(
                [
                    .deleted(recordName: composed), .deleted(recordName: decomposed),  // both go
                    .deleted(recordName: other), tag(otherDecomposed, "t2"),  // one goes, the other is updated
                ], "fk1-x-0-2", true))
        let rows = try await Connection.withConnectionOffPool(p.url) { c in
            try c.query(
                """
                SELECT encode(convert_to(record_name, 'UTF8'), 'hex'), change_tag, deleted_at IS NOT NULL
                FROM \(quoteIdentifier(p.schema)).\(quoteIdentifier(p.tables["Tag"]!)) ORDER BY 1
                """
            ).rows.map { $0.map { $0 ?? "-" } }
        }
        #expect(
            rows
                == [
                    [composed.utf8Hex, "t1", "t"], [decomposed.utf8Hex, "t1", "t"], [other.utf8Hex, "t1", "t"], [otherDecomposed.utf8Hex, "t2", "f"],
                ].sorted { $0[0] < $1[0] }, "\(rows)")
        await destination.close()
    }

    // MARK: A name taken by a record of another type

    func folder(_ name: String, _ changeTag: String) -> RecordEntry {
        .record(Record(recordName: name, recordType: "Folder", recordChangeTag: changeTag, fields: ["name": .string(name)]))
    }

    /// When the record of the new type comes, as against the batches of the old one.
    enum Moment: String, CaseIterable, CustomTestStringConvertible {
        /// The zone is still copied straight into its tables.
        case inTheBackfill
        /// The backfill held more names than the run keeps, and merges.
        case pastTheNamesKept
        /// The zone's feed was drained: merged since.
        case afterTheFeedDrained
        /// A later run: the zone has rows, and is merged.
        case inALaterRun
        var testDescription: String { rawValue }
    }

    /// CloudKit lets a deleted record's name be taken by a record of another type, and a feed
    /// read after both reports only the new record. Its row in the old type's table goes as if
    /// the deletion had been reported, logged so; before, both rows stayed live.
    @Test(arguments: Moment.allCases, ["tombstone", "hard"])
    func aNameTakenByARecordOfAnotherTypeDeletesTheOldRow(_ moment: Moment, deletes: String) async throws {
        let (pipeline, destination, batch) = try await zone(at: moment, "typechange", deletes: deletes, first: [tag("X", "t1"), tag("KEPT", "t1")])
        _ = try await destination.apply(batch([folder("X", "t2")], "fk1-x-0-3", true))
        await destination.close()
        let p = pipeline

        let rows = try await Connection.withConnectionOffPool(p.url) { c in
            let schema = quoteIdentifier(p.schema)
            return try c.query(
                """
                SELECT record_type || ' ' || record_name || CASE WHEN deleted_at IS NULL THEN '' ELSE ' deleted' END
                FROM (SELECT record_type, record_name, deleted_at FROM \(schema).tags
                    UNION ALL SELECT record_type, record_name, deleted_at FROM \(schema).folders) AS t ORDER BY 1
                """
            ).rows.map { $0[0]! }
        }
        let old = deletes == "hard" ? [] : ["Tag X deleted"]
        let more = moment == .pastTheNamesKept ? ["Tag EVEN MORE", "Tag MORE"] : []
        #expect(rows == (["Folder X", "Tag KEPT"] + more + old).sorted())
        let snapshot = try await DestinationSnapshot.read(p)
        #expect(snapshot.tombstonesByReason == ["deleted": 1])
        #expect(snapshot.runTombstones == 1)
    }

    /// A batch that reports a record's deletion and then a record of another type under its
    /// name: the deletion is the old row's one log, typed by it. Before, the name's new type
    /// deleted the old row and logged it, and the reported deletion was logged again (typed by
    /// the new record). A record made and then deleted under a name taken from another type
    /// ends two records, and both are logged; so does a name deleted, then made as one type, then
    /// as another.
    @Test(arguments: Moment.allCases)
    func aDeletionThenARecordOfAnotherTypeUnderItsNameIsLoggedOnce(_ moment: Moment) async throws {
        let (pipeline, destination, batch) = try await zone(at: moment, "deltype", first: [tag("X", "t1"), tag("Z", "t1"), tag("KEPT", "t1")])
        let outcome = try await destination.apply(
            batch(
                [
                    .deleted(recordName: "X"), folder("X", "t2"), folder("Z", "t2"), .deleted(recordName: "Z"),
                    .deleted(recordName: "W"), tag("W", "t1"), folder("W", "t2"),
                ], "fk1-x-0-3", true))
        await destination.close()
        let p = pipeline

        let snapshot = try await DestinationSnapshot.read(p)
        let live = snapshot.rows.filter { !$0.value.deleted }.map { "\($0.value.recordType) \($0.key.recordName)" }.sorted()
        #expect(live == (["Folder W", "Folder X", "Tag KEPT"] + (moment == .pastTheNamesKept ? ["Tag EVEN MORE", "Tag MORE"] : [])).sorted())
        let tombstones = try await Connection.withConnectionOffPool(p.url) { c in
            try c.query("SELECT record_type || ' ' || record_name FROM \(quoteIdentifier(p.schema)).zonefeed_tombstones ORDER BY 1").rows
                .map { $0[0] ?? "(no type)" }
        }
        #expect(
            tombstones == ["Folder Z", "Tag W", "Tag W", "Tag X", "Tag Z"],
            "X's reported deletion once, as a Tag; Z's Tag and Folder each once; W's deletion, and its Tag the Folder replaced")
        #expect(outcome.tombstones == 5)
        #expect(snapshot.runTombstones == 5)
    }

    /// Two names that trade types within one batch: the type of each name's last version is
    /// the one left live, whether the zone was copied straight into its tables or merged.
    @Test(arguments: [false, true])
    func namesThatTradeTypesInOneBatchAreLeftLiveInTheirLastType(afterRowsOfTheZone: Bool) async throws {
        let (p, destination, batch) = try await start("typetrade")
        // A drained feed: the zone is merged from then on.
        if afterRowsOfTheZone { _ = try await destination.apply(batch([tag("EARLIER", "t1")], "fk1-x-0-1", true)) }
        _ = try await destination.apply(batch([tag("X", "t1"), folder("Y", "t1"), folder("X", "t2"), tag("Y", "t2")], "fk1-x-0-2", true))
        await destination.close()

        let snapshot = try await DestinationSnapshot.read(p)
        #expect(snapshot.namesLiveInTwoTables.isEmpty, "\(snapshot.namesLiveInTwoTables)")
        let live = snapshot.rows.filter { !$0.value.deleted }.map { "\($0.value.recordType) \($0.key.recordName) \($0.value.changeTag ?? "-")" }.sorted()
        #expect(live == (["Folder X t2", "Tag Y t2"] + (afterRowsOfTheZone ? ["Tag EARLIER t1"] : [])).sorted())
        let tombstones = try await Connection.withConnectionOffPool(p.url) { c in
            try c.query("SELECT record_type || ' ' || record_name FROM \(quoteIdentifier(p.schema)).zonefeed_tombstones ORDER BY 1").rows.map { $0[0]! }
        }
        #expect(tombstones == ["Folder Y", "Tag X"])
    }
}

extension BatchDeletionTests {
    /// A zone whose first batch wrote `first` (Tags), brought to `moment`, and how to make its
    /// next batch (read from token `fk1-x-0-2` or before: the next is `fk1-x-0-3`).
    func zone(
        at moment: Moment, _ prefix: String, deletes: String = "tombstone", first: [RecordEntry]
    ) async throws -> (FakePipeline, PostgresDestination, (_ entries: [RecordEntry], _ token: String, _ isLast: Bool) -> ChangeBatch) {
        let limits = moment == .pastTheNamesKept ? PostgresDestination.Limits(directNames: 3) : PostgresDestination.Limits()
        var (pipeline, destination, batch) = try await start(prefix, deletes: deletes, limits: limits)
        _ = try await destination.apply(batch(first, "fk1-x-0-1", moment == .afterTheFeedDrained))
        switch moment {
        case .pastTheNamesKept:
            _ = try await destination.apply(batch([tag("MORE", "t1"), tag("EVEN MORE", "t1")], "fk1-x-0-2", false))
        case .inALaterRun:
            await destination.close()
            (pipeline, destination, batch) = try await start(pipeline)
        case .inTheBackfill, .afterTheFeedDrained: break
        }
        return (pipeline, destination, batch)
    }

    /// A later run of `p`'s destination, and how to make a batch of the zone in it.
    func start(
        _ p: FakePipeline
    ) async throws -> (FakePipeline, PostgresDestination, (_ entries: [RecordEntry], _ token: String, _ isLast: Bool) -> ChangeBatch) {
        let destination = try p.destination(limits: .init())
        try await destination.prepare()
        return (p, destination, try await batches(of: destination))
    }

    /// Batches of the zone in a run begun on `destination`, each read from the token of the one
    /// made before it (the first from the checkpoint): the tests apply each as it is made.
    func batches(of destination: PostgresDestination) async throws -> (_ entries: [RecordEntry], _ token: String, _ isLast: Bool) -> ChangeBatch {
        let run = try await destination.startRun()
        let checkpoint = try await destination.zoneCheckpoint(zone)
        let zone = self.zone
        let last = Mutex(checkpoint.token)
        return { entries, token, isLast in
            ChangeBatch(
                zoneID: zone, runID: run, generation: checkpoint.generation, pageCount: 1, entries: entries,
                from: last.withLock { last in
                    defer { last = ChangeToken(token) }
                    return last
                }, token: ChangeToken(token), isLast: isLast, finishesResync: false)
        }
    }
}

extension FakePipeline {
    /// The pipeline's destination, with `limits` lowered for a test if need be.
    func destination(limits: PostgresDestination.Limits = .init()) throws -> PostgresDestination {
        PostgresDestination(
            pipelineName: name, settings: try pipeline().postgresSettings(), conninfo: url,
            logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }, limits: limits)
    }
}
