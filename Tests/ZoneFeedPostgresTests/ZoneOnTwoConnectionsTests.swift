import CloudKitModel
import FakeCloudKit
import LibPQ
import Logging
import Synchronization
import TestSupport
import Testing
import ZoneFeed
import ZoneFeedPostgres

/// A zone alone on the destination writes its next batch on the spare session while its last one
/// is written, and the two commit in the feed's order, or the later one not at all.
@Suite struct ZoneOnTwoConnectionsTests {
    /// One zone of 6,000 records, each once (a backfill's feed), in batches of 1,000, on the
    /// default two sessions; and the test's hold on its checkpoint.
    static func backfillOfOneZone(_ prefix: String, seed: UInt64) async throws -> (FakePipeline, CheckpointHold) {
        var fake = FakeSettings(seed: seed, zones: 1, recordsPerZone: 6_000)
        fake.churn = false
        var p = try await FakePipeline(prefix: prefix, fake: fake)
        p.commitEvery = 1_000
        return (p, try CheckpointHold(p))
    }

    /// The pipeline's destination, with a run started and the zone claimed, and the zone's
    /// batches as the runner makes them: the `sequence`th of the run, of one page of `entries`,
    /// moving the zone's token to `token`.
    static func destinationOfTheZone(
        _ p: FakePipeline
    ) async throws -> (PostgresDestination, ZoneID, (_ sequence: Int, _ entries: [RecordEntry], _ token: String) -> ChangeBatch) {
        let zone = ZoneID(zoneName: "Zone01", ownerRecordName: "_fakeOwner")
        let destination = try PostgresDestination(pipeline: p.pipeline(), conninfo: p.url, logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() })
        try await destination.prepare()
        let runID = try await destination.startRun()
        #expect(try await destination.claimZone(zone))
        let checkpoint = try await destination.zoneCheckpoint(zone)
        return (
            destination, zone,
            // A batch of sequence 0 is read from the checkpoint; a later one `follow`s the one before.
            { sequence, entries, token in
                var batch = ChangeBatch(
                    zoneID: zone, runID: runID, generation: checkpoint.generation, pageCount: 1, entries: entries, from: checkpoint.token,
                    token: ChangeToken(token), isLast: false, finishesResync: false)
                batch.sequence = sequence
                return batch
            }
        )
    }

    /// Two batches of the zone: the earlier makes a Tag, the later a Folder of the same name
    /// (the Tag was deleted and its name taken), following it.
    static func aTagThenAFolderOfItsName(
        _ batch: (_ sequence: Int, _ entries: [RecordEntry], _ token: String) -> ChangeBatch
    ) -> (made: ChangeBatch, taken: ChangeBatch) {
        let made = batch(0, [.record(Record(recordName: "TAKEN", recordType: "Tag", recordChangeTag: "t1", fields: ["label": .string("x")]))], "t-1")
        var taken = batch(1, [.record(Record(recordName: "TAKEN", recordType: "Folder", recordChangeTag: "t2", fields: ["name": .string("x")]))], "t-2")
        taken.follow(made)
        return (made, taken)
    }

    /// Applies `earlier` while the test holds the zone's checkpoint row, so that it waits there
    /// uncommitted; then `later` on the spare session, alongside it, until it waits for the
    /// earlier; lets the earlier commit, and returns what came of the later.
    static func apply(
        _ earlier: ChangeBatch, then later: ChangeBatch, alongside destination: PostgresDestination, zone: ZoneID, hold: CheckpointHold
    ) async throws -> Result<BatchOutcome, any Error> {
        try await hold.take()
        let first = Task { try await destination.apply(earlier) }
        #expect(try await hold.waitUntil { $0 == ["transactionid"] } == ["transactionid"], "the first batch waits on the held row")
        let spare = try #require(destination.reserveSpareConnection(for: zone, besides: nil))
        let second = Task { try await destination.apply(later, on: spare) }
        #expect(try await hold.waitUntil { $0.contains("advisory") }.contains("advisory"), "the second waits for the first")
        try await hold.release()
        _ = try await first.value
        return await second.result
    }

    /// Once both have committed: the Folder is live, the Tag deleted, and its deletion logged.
    static func expectTheFolderAloneLive(_ p: FakePipeline) async throws {
        let snapshot = try await DestinationSnapshot.read(p)
        #expect(snapshot.namesLiveInTwoTables.isEmpty, "\(snapshot.namesLiveInTwoTables)")
        let row = snapshot.rows[ExpectedState.Key(zoneName: "Zone01", recordName: "TAKEN")]
        #expect(row?.description == "Folder t2", "the Folder is live, the Tag deleted: \(String(describing: row))")
        #expect(snapshot.tombstonesByReason == ["deleted": 1])
    }

    /// Deadlocks PostgreSQL has broken in the test database.
    static let deadlocks = "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"

    /// The number `query` gives, asked every 20 ms until `done` holds it (five minutes at most: in
    /// the full suite, the server may wait long for a core).
    static func poll(_ url: String, _ query: String, _ values: [String] = [], until done: @escaping (Int) -> Bool) async throws -> Int {
        let deadline = ContinuousClock.now + .seconds(300)
        while true {
            let value = try await Connection.withConnectionOffPool(url) { c in
                _ = try c.query("SELECT pg_stat_clear_snapshot()")
                return try c.query(query, values).scalar(as: Int.self)
            }
            if done(value) || ContinuousClock.now >= deadline { return value }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// The test holds the zone's checkpoint row, so that the zone's first batch cannot commit.
    /// Its second batch (no record is in both) is written meanwhile on the other
    /// session, and waits for the first at its end (both waits seen in pg_locks). Released, both
    /// commit, and so does every later batch.
    @Test func aZoneAloneWritesItsNextBatchWhileTheLastIsWritten() async throws {
        let (p, hold) = try await Self.backfillOfOneZone("alongside", seed: 71)
        defer { hold.close() }
        async let summary = hold.run(p)
        let waits = try await hold.waitForTwoSessions()
        try await hold.release()
        let run = try await summary

        #expect(waits.count == 2, "two sessions of the pipeline wait at once: \(waits)")
        #expect(waits.contains("advisory"), "one of them, the second batch's, waits for the first batch to end: \(waits)")
        let expected = p.expected()
        let snapshot = try await DestinationSnapshot.read(p)
        #expect(snapshot.differences(from: expected) == [])
        #expect(snapshot.runPages == expected.pages, "no page applied twice or lost")
        #expect(run.totals.pages == expected.pages)
        #expect(try await p.run().totals.pages == 0, "the checkpoint is the feed's last token")
    }

    /// As above, but the first batch's session is ended by the server while the second waits for
    /// it. The second batch's wait ends, but it finds the zone's token not the first's and
    /// commits nothing. The next run applies the whole zone, every page once.
    @Test func aBatchWrittenAlongsideOneThatFailsIsNotCommitted() async throws {
        let (p, hold) = try await Self.backfillOfOneZone("alongfail", seed: 73)
        defer { hold.close() }
        async let failed: Void = { await #expect(throws: RunError.self) { try await hold.run(p) } }()
        let waits = try await hold.waitForTwoSessions()
        #expect(waits.count == 2 && waits.contains("advisory"), "\(waits)")
        try await hold.endTheFirstBatchsSession()
        try await hold.release()
        await failed

        #expect(try await p.recordsApplied() == 0, "neither batch committed")
        #expect(try await DestinationSnapshot.read(p).rows.isEmpty)
        try await p.run()
        let expected = p.expected()
        let snapshot = try await DestinationSnapshot.read(p)
        #expect(snapshot.differences(from: expected) == [])
        #expect(snapshot.runPages == expected.pages, "no page applied twice or lost")
    }

    /// The earlier batch makes a record's row, the later one deletes the record. The earlier
    /// cannot commit (the test holds the checkpoint row); the later, written alongside, must
    /// wait for it before it deletes: at READ COMMITTED its deletion would neither see nor wait
    /// for the uncommitted row, and the record would stay live after both committed.
    @Test func aDeletionWrittenAlongsideFindsTheRowTheBatchBeforeItMade() async throws {
        let (p, hold) = try await Self.backfillOfOneZone("alongdel", seed: 79)
        defer { hold.close() }
        let (destination, zone, batch) = try await Self.destinationOfTheZone(p)
        let made = batch(0, [.record(Record(recordName: "GONE", recordType: "Tag", recordChangeTag: "t1", fields: ["label": .string("x")]))], "t-1")
        var deleted = batch(1, [.deleted(recordName: "GONE")], "t-2")
        deleted.follow(made)

        _ = try await Self.apply(made, then: deleted, alongside: destination, zone: zone, hold: hold).get()
        await destination.close()

        let row = try await DestinationSnapshot.read(p).rows[ExpectedState.Key(zoneName: "Zone01", recordName: "GONE")]
        #expect(row?.deleted == true, "the record the later batch deleted is deleted: \(String(describing: row))")
    }

    /// The earlier batch meets a record type no table holds yet and makes its table, with the
    /// record's row; the later, written alongside, deletes the record. It read the tables
    /// before the earlier committed the new one, and with that list its deletion missed the
    /// row: the record stayed live for good, its deletion passed. It now fails once it sees the
    /// tables grew, and is applied again after the earlier, as the runner does.
    @Test func aDeletionWrittenAlongsideABatchThatMadeATableFindsTheRowThere() async throws {
        var (evolving, hold) = try await Self.backfillOfOneZone("alonggrow", seed: 83)
        defer { hold.close() }
        evolving.recordTypesSection = "recordTypes: auto\n"
        let p = evolving
        let (destination, zone, batch) = try await Self.destinationOfTheZone(p)
        let made = batch(0, [.record(Record(recordName: "GONE", recordType: "Gadget", recordChangeTag: "t1", fields: ["label": .string("x")]))], "t-1")
        var deleted = batch(1, [.deleted(recordName: "GONE")], "t-2")
        deleted.follow(made)

        let alongside = try await Self.apply(made, then: deleted, alongside: destination, zone: zone, hold: hold)
        let refusal = #expect(throws: SyncError.self, "written alongside, it saw the tables grow") { try alongside.get() }
        #expect(refusal?.message.hasPrefix("the tables grew while a batch of zone Zone01 was written alongside") == true, "\(String(describing: refusal))")
        _ = try await destination.apply(deleted)
        await destination.close()

        let live = try await Connection.withConnectionOffPool(p.url) { c in
            try c.query("SELECT count(*) FROM \(quoteIdentifier(p.schema)).gadget WHERE record_name = 'GONE' AND deleted_at IS NULL").scalar
        }
        #expect(live == "0", "the record the later batch deleted is not live")
    }

    /// The earlier batch makes a Tag, the later one a Folder of the same name (the Tag was
    /// deleted and its name taken). The later, written alongside while the earlier cannot
    /// commit, finds the name among those copied before, is merged, and waits for the earlier
    /// before it looks for the name in the other tables: the Tag's row is deleted once both
    /// commit, and only the Folder's is live.
    @Test func aNameTakenByAnotherTypeAlongsideDeletesTheRowTheBatchBeforeItMade() async throws {
        let (p, hold) = try await Self.backfillOfOneZone("alongtype", seed: 89)
        defer { hold.close() }
        let (destination, zone, batch) = try await Self.destinationOfTheZone(p)
        let (made, taken) = Self.aTagThenAFolderOfItsName(batch)

        _ = try await Self.apply(made, then: taken, alongside: destination, zone: zone, hold: hold).get()
        await destination.close()

        try await Self.expectTheFolderAloneLive(p)
    }

    /// The same two batches the other way round in time: the later one (the Folder) notes its
    /// name first and copies it straight into folders, while the test holds the earlier one back
    /// (its batch lock) and holds the folders table. The earlier one then meets the name, is
    /// merged, and looks for the name in folders, where the later one's row is not committed and
    /// cannot be seen. So the later one, which chose to copy straight before the zone was turned
    /// to merging, must find that out once the earlier has committed, and look for the name in
    /// tags itself: copied straight, it would leave the Tag live beside the Folder.
    @Test func aNameTakenByAnotherTypeCopiedFirstAlongsideIsLookedForOnceTheBatchBeforeCommits() async throws {
        let (p, hold) = try await Self.backfillOfOneZone("alongfirst", seed: 97)
        defer { hold.close() }
        let (destination, zone, batch) = try await Self.destinationOfTheZone(p)
        let (made, taken) = Self.aTagThenAFolderOfItsName(batch)

        // The earlier batch's own lock (`lockBatch`), held by the test, and the folders table.
        let owner = zone.ownerRecordName
        let madeLock = "zonefeed:\(p.schema):\(p.name)/\(owner.utf8.count):\(owner)/\(zone.zoneName)#\(made.runID).0"
        let schema = quoteIdentifier(p.schema)
        try await hold.door.offPool { c in
            try c.query("SELECT pg_advisory_lock(hashtextextended($1, 0))", [madeLock])
            try c.execute("BEGIN")
            try c.execute("LOCK TABLE \(schema).folders IN SHARE MODE")
        }
        let spare = try #require(destination.reserveSpareConnection(for: zone, besides: nil))
        let second = Task { try await destination.apply(taken, on: spare) }
        #expect(try await hold.waitUntil { $0 == ["relation"] } == ["relation"], "the later batch noted its name and waits to copy it")
        let first = Task { try await destination.apply(made) }
        #expect(try await hold.waitUntil { $0 == ["advisory", "relation"] } == ["advisory", "relation"], "the earlier batch waits for its lock")
        try await hold.door.offPool { c in _ = try c.query("SELECT pg_advisory_unlock(hashtextextended($1, 0))", [madeLock]) }
        #expect(
            try await hold.waitUntil { $0 == ["relation", "relation"] } == ["relation", "relation"],
            "the earlier batch met the name, was merged, and waits to look for it in folders")
        try await hold.release()
        _ = try await first.value
        _ = try await second.value
        await destination.close()

        try await Self.expectTheFolderAloneLive(p)
    }

    /// The two batches meet in a deadlock that PostgreSQL breaks by rolling back the *earlier*
    /// one: the later batch wrote a record's row first (the test holds the folders table, which
    /// the earlier one writes before its tags) and waits for the earlier; the earlier then waits
    /// for that row. The later one's own deadlock check has passed by then (the test waits three
    /// of the server's `deadlock_timeout`), so the earlier one's finds the cycle and is rolled
    /// back. It is applied again and commits; the later one, its wait ended by that rollback,
    /// finds the zone's token not the earlier's and commits nothing; applied again after it, the
    /// record ends at its later version and the zone's token at the later batch's.
    @Test func aDeadlockThatRollsBackTheEarlierBatchCommitsNeitherOutOfOrder() async throws {
        let (p, hold) = try await Self.backfillOfOneZone("alonglock", seed: 83)
        defer { hold.close() }
        let (destination, zone, batch) = try await Self.destinationOfTheZone(p)
        func tag(_ changeTag: String) -> RecordEntry {
            .record(Record(recordName: "BOTH", recordType: "Tag", recordChangeTag: changeTag, fields: ["label": .string(changeTag)]))
        }
        let folder = RecordEntry.record(Record(recordName: "FOLDER", recordType: "Folder", recordChangeTag: "f1", fields: ["name": .string("f")]))
        let earlier = batch(0, [folder, tag("t1")], "t-1")
        var later = batch(1, [tag("t2")], "t-2")
        later.follow(earlier)

        let schema = quoteIdentifier(p.schema)
        let deadlocksBefore = try await hold.door.offPool { c in
            try c.execute("BEGIN")
            try c.execute("LOCK TABLE \(schema).folders IN EXCLUSIVE MODE")
            return try c.query(Self.deadlocks).scalar(as: Int.self)
        }
        let first = Task { try await destination.apply(earlier) }
        #expect(try await hold.waitUntil { $0 == ["relation"] } == ["relation"], "the earlier batch waits for the folders table")
        let spare = try #require(destination.reserveSpareConnection(for: zone, besides: nil))
        let second = Task { try await destination.apply(later, on: spare) }
        #expect(try await hold.waitUntil { $0.contains("advisory") }.contains("advisory"), "the later batch wrote its row and waits")
        // The later batch's deadlock check runs once, deadlock_timeout after its wait began (as
        // pg_locks dates it), and finds nothing yet; then the earlier batch may go on. The check
        // itself shows nowhere, so the test waits until the wait is three times that old.
        let waitedLong = """
            SELECT count(*) FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
            WHERE NOT l.granted AND l.locktype = 'advisory' AND a.application_name = $1
              AND clock_timestamp() - l.waitstart > 3 * current_setting('deadlock_timeout')::interval
            """
        #expect(try await Self.poll(p.url, waitedLong, [hold.application]) { $0 == 1 } == 1, "the later batch has waited out its check")
        try await hold.release()

        _ = try await first.value
        let refusal = await #expect(throws: SyncError.self) { try await second.value }
        #expect(
            refusal?.message.contains("was not at the token of the batch before this one") == true,
            "the later batch, not the deadlock's victim, was fenced out: \(String(describing: refusal))")
        // The victim's backend reports it with its other statistics, within seconds.
        let deadlocks = try await Self.poll(p.url, Self.deadlocks) { $0 > deadlocksBefore } - deadlocksBefore
        #expect(deadlocks >= 1, "PostgreSQL broke a deadlock")
        #expect(try await p.recordsApplied() == 2, "the earlier batch alone committed, once")

        // The runner applies the later batch again once the earlier committed, still fenced.
        _ = try await destination.apply(later)
        await destination.close()
        let rows = try await DestinationSnapshot.read(p).rows
        #expect(rows[ExpectedState.Key(zoneName: "Zone01", recordName: "BOTH")]?.changeTag == "t2", "the later version is the row's")
        #expect(rows[ExpectedState.Key(zoneName: "Zone01", recordName: "FOLDER")]?.deleted == false)
        #expect(try await p.recordsApplied() == 3, "each batch committed once")
        let token = try await Connection.withConnectionOffPool(p.url) { c in
            try c.query("SELECT token FROM \(schema).zonefeed_checkpoints WHERE scope = 'zone'").scalar
        }
        #expect(token == "t-2", "the zone's token is the later batch's")
    }
}

/// A transaction of the test's own that holds the zones' checkpoint rows (`FOR UPDATE`), so that
/// a batch that comes to move its zone's token waits.
final class CheckpointHold: Sendable {
    let door: Connection
    let url: String
    let schema: String
    let application: String

    init(_ p: FakePipeline) throws {
        door = try Connection(p.url)
        url = p.url
        schema = quoteIdentifier(p.schema)
        application = "zonefeed/\(p.name)"
    }

    /// Whether the run has ended.
    let ended = Atomic(false)

    /// A run of the pipeline in this process, which the hold stops before its first batch
    /// commits.
    func run(_ p: FakePipeline) async throws -> RunSummary {
        defer { ended.store(true, ordering: .sequentiallyConsistent) }
        return try await p.run { event in
            if case .willFetchRecordZoneChanges = event { try? await self.take() }
        }
    }

    /// Called once the run has read the zone's checkpoint, before its first batch.
    func take() async throws {
        try await door.offPool { [schema] c in
            try c.execute("BEGIN")
            try c.query("SELECT 1 FROM \(schema).zonefeed_checkpoints WHERE scope = 'zone' FOR UPDATE")
        }
    }

    /// The kinds of lock the pipeline's sessions wait on, once two of them wait and one of them
    /// for a batch, or once the run has ended.
    func waitForTwoSessions() async throws -> [String] {
        try await waitUntil { $0.count >= 2 && $0.contains("advisory") }
    }

    /// The kinds of lock the pipeline's sessions wait on, once `done` says so, or once the run
    /// has ended (five minutes at most: in the full suite, the run's tasks may wait long for a
    /// thread).
    func waitUntil(_ done: @escaping ([String]) -> Bool) async throws -> [String] {
        let deadline = ContinuousClock.now + .seconds(300)
        var waits: [String] = []
        while ContinuousClock.now < deadline && !ended.load(ordering: .sequentiallyConsistent) {
            waits = try await Connection.withConnectionOffPool(url) { [application] c in
                try c.query(
                    """
                    SELECT l.locktype FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
                    WHERE NOT l.granted AND a.application_name = $1 ORDER BY 1
                    """, [application]
                ).rows.map { $0[0] ?? "" }
            }
            if done(waits) { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        return waits
    }

    /// Ends, from the server, the session that waits on the held rows: the first batch's.
    func endTheFirstBatchsSession() async throws {
        let ended = try await door.offPool { [application] c in
            try c.query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND pg_backend_pid() = ANY (pg_blocking_pids(pid))",
                [application]
            ).rows.count
        }
        #expect(ended == 1, "one session waited on the test's transaction")
    }

    func release() async throws {
        _ = try await door.offPool { c in try c.execute("ROLLBACK") }
    }

    func close() { door.close() }
}

extension ChangeBatch {
    /// Follows `before`, as the runner makes a batch written alongside it: read from its token,
    /// committed only after it.
    mutating func follow(_ before: ChangeBatch) {
        follows = BatchPosition(sequence: before.sequence, token: before.token)
        from = before.token
    }
}
