import FakeCloudKit
import Foundation
import LibPQ
import TestSupport
import Testing
import ZoneFeed
import ZoneFeedPostgres

/// Each run makes sure the destination's tables are as the pipeline file says, and changes them
/// only when they are not: changing a table locks it against every reader.
@Suite struct SchemaUpkeepTests {
    /// Whether a run of `p` succeeds within 120 s while `holder`'s open transaction holds what it
    /// holds (a stuck run waits for ever; a loaded machine's, tens of seconds).
    static func runFinishes(_ p: FakePipeline, whileHeldBy holder: Connection) async throws -> Bool {
        try await runEnds(p, whileHeldBy: holder) == .success(.succeeded)
    }

    /// How a run of `p` ends while `holder`'s open transaction holds what it holds: its status,
    /// or what it threw; nil when it has not ended within 120 s. The transaction is committed
    /// once the run ended or the time ran out, so that a run stuck behind it is let go and the
    /// test ends.
    static func runEnds(_ p: FakePipeline, whileHeldBy holder: Connection) async throws -> Result<RunStatus, RunFailure>? {
        try await withThrowingTaskGroup(of: Result<RunStatus, RunFailure>?.self) { group in
            group.addTask {
                do {
                    return .success(try await p.run().status)
                } catch {
                    return .failure(RunFailure(said: "\(error)"))
                }
            }
            group.addTask {
                try await Task.sleep(for: .seconds(120))
                return nil
            }
            defer { _ = try? holder.execute("COMMIT") }
            let first = try await group.next()!
            group.cancelAll()
            return first
        }
    }

    struct RunFailure: Error, Equatable {
        var said: String
    }

    @Test func aRunDoesNotWaitForReadersOfItsTables() async throws {
        var p = try await FakePipeline(prefix: "readers", fake: FakeSettings(seed: 4, zones: 2, recordsPerZone: 500))
        try await p.run()
        let reader = try Connection(p.url)
        defer { reader.close() }
        let schema = quoteIdentifier(p.schema)
        // An analyst's long transaction holds its tables until it ends.
        try reader.execute("BEGIN")
        try reader.query("SELECT count(*) FROM \(schema).notes_live")
        try reader.query("SELECT count(*) FROM \(schema).folders")

        p.fake.recordsPerZone = 800
        let finished = try await Self.runFinishes(p, whileHeldBy: reader)
        #expect(finished, "the run finished while a reader held the tables")
        #expect(try await DestinationSnapshot.read(p).differences(from: p.expected()) == [])
    }

    /// A schema's DDL lock (CREATE … IF NOT EXISTS races with a concurrent creation) is taken only
    /// by a run that has something to make in it: a pipeline whose tables exist, every watch
    /// cycle among them, does not wait for another pipeline making its own in the same schema, or
    /// for whatever that one waits on while holding the lock. A first run still takes its turn.
    @Test func onlyARunWithTablesToMakeWaitsForAnotherPipelinesDDL() async throws {
        var p = try await FakePipeline(prefix: "ddlturn", fake: FakeSettings(seed: 6, zones: 2, recordsPerZone: 300))
        try await p.run()
        let other = try Connection(p.url)
        defer { other.close() }
        // Another pipeline making its tables, in a transaction that has not ended.
        try other.execute("BEGIN")
        try other.query("SELECT pg_advisory_xact_lock(hashtext('zonefeed ddl'), hashtext($1))", [p.schema])

        p.fake.recordsPerZone = 500
        // (A run that took this lock at every start waited here for ever.)
        let finished = try await Self.runFinishes(p, whileHeldBy: other)
        #expect(finished, "the run of a pipeline whose tables exist finished while another held the DDL lock")
        #expect(try await DestinationSnapshot.read(p).differences(from: p.expected()) == [])

        // A new pipeline in the same schema: its tables are to be made.
        var newcomer = try await FakePipeline(prefix: "ddlnew", fake: FakeSettings(seed: 7, zones: 1, recordsPerZone: 100))
        newcomer.schema = p.schema
        newcomer.tables = ["Note": "new_notes", "Folder": "new_folders", "Tag": "new_tags"]
        newcomer.recordTypesSection = "recordTypes:\n" + newcomer.tables.sorted { $0.key < $1.key }.map { "  \($0.key):\n    table: \($0.value)\n" }.joined()
        try other.execute("BEGIN")
        try other.query("SELECT pg_advisory_xact_lock(hashtext('zonefeed ddl'), hashtext($1))", [p.schema])
        async let firstRun = newcomer.run()
        // Whatever happens below, the run is let go before it is awaited at the end of the scope.
        defer { _ = try? other.execute("COMMIT") }
        // Looked at from a session of its own: a transaction sees pg_stat_activity as it was when
        // it first looked.
        let look = try Connection(p.url)
        defer { look.close() }
        var waited = false
        for _ in 0..<600 where !waited {
            waited =
                try look.query(
                    """
                    SELECT count(*) > 0 FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
                    WHERE l.locktype = 'advisory' AND NOT l.granted AND a.application_name = $1
                    """, ["zonefeed/\(newcomer.name)"]
                ).scalar(as: Bool.self)
            if !waited { try await Task.sleep(for: .milliseconds(100)) }
        }
        try other.execute("COMMIT")
        #expect(waited, "a first run waited for the DDL lock")
        #expect(try await firstRun.status == .succeeded)
        #expect(try await DestinationSnapshot.read(newcomer).differences(from: newcomer.expected()) == [])
    }

    @Test func aTableMadeByAnOlderMappingIsBroughtUpToDate() async throws {
        let p = try await FakePipeline(prefix: "upkeep", fake: FakeSettings(seed: 5, zones: 1, recordsPerZone: 400))
        try await p.run()
        let schema = quoteIdentifier(p.schema)
        // As an older zonefeed or mapping left it: no body column, no synced_at default, no view.
        try Connection.withConnection(p.url) { c in
            try c.execute("DROP VIEW \(schema).notes_live")
            try c.execute("ALTER TABLE \(schema).notes DROP COLUMN body, ALTER COLUMN synced_at DROP DEFAULT")
        }
        try await p.reset(all: true)
        let again = try await p.run()

        #expect(again.status == .succeeded)
        let (bodies, syncedAtDefault) = try Connection.withConnection(p.url) { c in
            (
                try c.query("SELECT count(*) FROM \(schema).notes_live WHERE body IS NOT NULL").scalar,
                try c.query(
                    """
                    SELECT column_default FROM information_schema.columns
                    WHERE table_schema = $1 AND table_name = 'notes' AND column_name = 'synced_at'
                    """, [p.schema]
                ).scalar
            )
        }
        #expect(bodies != "0", "the column is back, filled, and in the view")
        #expect(syncedAtDefault == "now()")
        #expect(try await DestinationSnapshot.read(p).differences(from: p.expected()) == [])
    }

    /// A run must add a column (a mapping changed, or a newer zonefeed) to a table an analyst's
    /// long transaction reads: ALTER TABLE waits for that reader, and every reader after it waits
    /// for the ALTER. The change now waits a few seconds at a time, four times, then the run
    /// fails saying why, having changed nothing; it waited for the reader for ever before,
    /// holding every later reader of the table. Once the reader is done, the next run adds it.
    @Test func aColumnToAddToATableALongQueryReadsWaitsABoundedTimeThenTheRunSaysWhy() async throws {
        let p = try await FakePipeline(prefix: "upkeepwait", fake: FakeSettings(seed: 7, zones: 1, recordsPerZone: 100))
        try await p.run()
        let schema = quoteIdentifier(p.schema)
        try Connection.withConnection(p.url) { c in _ = try c.execute("ALTER TABLE \(schema).notes DROP COLUMN body CASCADE") }
        let analyst = try Connection(p.url)
        defer { analyst.close() }
        try analyst.execute("BEGIN")
        try analyst.query("SELECT count(*) FROM \(schema).notes")

        let started = ContinuousClock.now
        let outcome = try #require(try await Self.runEnds(p, whileHeldBy: analyst), "the run still waited for the reader after 120 s")
        let waited = ContinuousClock.now - started
        guard case .failure(let failure) = outcome else {
            Issue.record("the run did not fail: \(outcome)")
            return
        }
        #expect(failure.said.contains("waited 5s for a table 4 times: a long query holds it"), "\(failure.said)")
        #expect(waited >= .seconds(19) && waited < .seconds(100), "\(waited)")

        try await p.reset(all: true)
        let next = try await p.run()
        #expect(next.status == .succeeded)
        let bodies = try Connection.withConnection(p.url) { c in
            try c.query("SELECT count(*) FROM \(schema).notes_live WHERE body IS NOT NULL").scalar(as: Int.self)
        }
        #expect(bodies > 0, "the column is back, filled, and in the view")
    }

    /// Evolution made table `tags` for record type Tag; the file now maps Folder (Tag renamed,
    /// say) to that table. Replayed, the recorded change gave `tags` to Tag as well: each
    /// type's batches then took the rows they had just written for names another type had
    /// taken, and tombstoned every one. The file's mapping wins, and the table is Folder's alone.
    @Test func aTableTheFileGivesToAnotherRecordTypeIsNotGivenBackToTheOneItWasMadeFor() async throws {
        var p = try await FakePipeline(prefix: "retyped", fake: FakeSettings(seed: 8, zones: 1, recordsPerZone: 1))
        p.recordTypesSection = "recordTypes:\n  Folder:\n    table: tags\n"
        let schema = try PostgresSchema(pipeline: p.pipeline())
        let replayed = schema.applying([SchemaChange(kind: .tableCreated, recordType: "Tag", table: "tags", why: "a record of a new type")])
        #expect(replayed.tables.map(\.mapping.recordType) == ["Folder"])
        #expect(replayed.tables.map(\.mapping.table) == ["tags"])
        let other = schema.applying([SchemaChange(kind: .tableCreated, recordType: "Tag", table: "tag_records", why: "a record of a new type")])
        #expect(other.tables.map(\.mapping.recordType).sorted() == ["Folder", "Tag"], "a table of its own is still replayed")
    }

    /// A field's type changed in the mapping after its column was made (a schema file's NUMBER
    /// pinned as INT64, a type edited by hand): the run is refused with what to do, and not
    /// told that the table was not made by zonefeed and should be dropped, which lost its rows.
    @Test func aFieldMappedAnewAsAnotherTypeSaysHowToKeepItsColumn() async throws {
        var p = try await FakePipeline(prefix: "retype", fake: FakeSettings(seed: 9, zones: 1, recordsPerZone: 50))
        try await p.run()
        p.recordTypesSection =
            "recordTypes:\n  Note:\n    table: notes\n    fields:\n"
            + FakePipeline.noteFields.replacingOccurrences(of: "wordCount: bigint", with: "wordCount: double precision") + "\n"
        let error = await #expect(throws: DestinationShapeError.self) { try await p.run() }
        #expect(
            error?.description
                == "column word_count of table \(p.schema).notes is bigint, and field wordCount is now mapped as double precision: zonefeed "
                + "never changes a column's type (values could be lost). Map wordCount as bigint again, or map it to a column of its own "
                + "({ column: <a new name>, type: \"double precision\" }), then reset the pipeline to fill it")

        // A list's types as the pipeline file writes them, and quoted as a flow mapping needs.
        p.recordTypesSection =
            "recordTypes:\n  Note:\n    table: notes\n    fields:\n"
            + FakePipeline.noteFields.replacingOccurrences(of: "reminders: timestamptz[]", with: "reminders: text[]") + "\n"
        let list = await #expect(throws: DestinationShapeError.self) { try await p.run() }
        #expect(
            list?.description.contains(
                "is timestamp with time zone[], and field reminders is now mapped as text[]: zonefeed never changes a column's type "
                    + "(values could be lost). Map reminders as timestamptz[] again, or map it to a column of its own "
                    + "({ column: <a new name>, type: \"text[]\" })") == true, "\(String(describing: list))")
    }

    /// A checkpoints table made before zones' rows had an incarnation gets the column, each row
    /// its own, and the zones go on from their tokens.
    @Test func aCheckpointsTableWithoutIncarnationsIsGivenThem() async throws {
        let p = try await FakePipeline(prefix: "incarn", fake: FakeSettings(seed: 7, zones: 3, recordsPerZone: 200))
        try await p.run()
        let schema = quoteIdentifier(p.schema)
        _ = try Connection.withConnection(p.url) { c in try c.execute("ALTER TABLE \(schema).zonefeed_checkpoints DROP COLUMN incarnation") }
        let again = try await p.run()
        #expect(again.status == .succeeded)
        let distinct = try Connection.withConnection(p.url) { c in
            try c.query("SELECT count(DISTINCT incarnation) FROM \(schema).zonefeed_checkpoints WHERE scope = 'zone'").scalar
        }
        #expect(distinct == "3")
        #expect(try await DestinationSnapshot.read(p).differences(from: p.expected()) == [])
    }
}
