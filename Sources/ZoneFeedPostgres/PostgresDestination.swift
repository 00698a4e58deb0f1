import CloudKitModel
import Dispatch
import Foundation
import LibPQ
import Logging
import ZoneFeed

/// The PostgreSQL destination. Each libpq connection is used from a dedicated serial queue so that
/// blocking calls never sit on Swift's cooperative pool. The first connection holds the run's
/// liveness lock and does the run-wide work; a zone is applied on the connection that claimed it
/// (its session holds the zone's advisory lock), one of up to `parallelZones`, opened when first
/// needed; a session may hold several zones. The session locks vanish if the process dies.
// @unchecked: the mutable members are touched only with `lock` held, each session's only on its
// queue. One of the three unchecked types left (with Session and LibPQ's Connection).
public final class PostgresDestination: Destination, @unchecked Sendable {
    /// The tables as this process last knew them: the pipeline's mapping, grown by the
    /// recorded schema changes when the schema evolves.
    public var schema: PostgresSchema { lock.withLock { _schema } }
    /// The pipeline's own mapping, before any change.
    let mappedSchema: PostgresSchema
    let pipelineName: String
    let settings: PostgresSettings
    /// The libpq connection string: it may hold a password; never print it.
    public let conninfo: String
    let logger: Logger

    /// One connection and what is used with it. Its members are touched only on its `queue`
    /// (@unchecked: that queue is what guards them).
    final class Session: @unchecked Sendable {
        let queue: DispatchQueue
        var connection: Connection?
        var encoders: [RowEncoder] = []
        /// The version of the schema its staging tables and encoders were made for; nil when
        /// unknown (a transaction that remade them was rolled back).
        var schemaVersion: Int64?
        /// How many staging tables it may have made, to drop when they are made again.
        var stagingTableCount = 0
        /// Its staging tables were remade in the transaction still open.
        var remadeInTransaction = false

        init(index: Int) {
            queue = DispatchQueue(label: "zonefeed.postgres.\(index)")
        }
    }

    /// `sessions[0]` is the run's; the others are for zones applied at the same time.
    private let sessions: [Session]
    private let lock = NSLock()
    // Guarded by `lock`.
    private var sessionOfZone: [ZoneID: Int] = [:]
    private var zoneState: [ZoneID: ZoneState] = [:]
    private var _runID: Int64 = 0
    private var _schema: PostgresSchema

    /// What this run knows of a zone it applies.
    struct ZoneState {
        /// The `pending_seq` this run read with the checkpoint: the zone's last batch clears
        /// `pending` only if no database-feed notice came in since.
        var seenPendingSeq: String?
        /// Per table name: whether batches are copied straight into the table. True while the
        /// zone had no rows in the table when this run first applied it and no copy has met a
        /// row already there; a merge through the staging table otherwise.
        var copiesDirectly: [String: Bool] = [:]
    }

    /// The destination of a pipeline whose destination is PostgreSQL; throws when it is another.
    public convenience init(pipeline: Pipeline, conninfo: String, logger: Logger) throws {
        self.init(pipelineName: pipeline.name, settings: try pipeline.postgresSettings(), conninfo: conninfo, logger: logger)
    }

    public init(pipelineName: String, settings: PostgresSettings, conninfo: String, logger: Logger) {
        self.pipelineName = pipelineName
        self.settings = settings
        mappedSchema = PostgresSchema(pipelineName: pipelineName, settings: settings)
        _schema = mappedSchema
        self.conninfo = conninfo
        self.logger = logger
        sessions = (0..<max(1, settings.parallelZones)).map(Session.init)
    }

    var runID: Int64 {
        get { lock.withLock { _runID } }
        set { lock.withLock { _runID = newValue } }
    }

    func state(of zone: ZoneID) -> ZoneState {
        lock.withLock { zoneState[zone] ?? ZoneState() }
    }

    func updateState(of zone: ZoneID, _ change: (inout ZoneState) -> Void) {
        lock.withLock { change(&zoneState[zone, default: ZoneState()]) }
    }

    /// Runs `body` on the run's connection.
    @discardableResult
    func onConnection<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        try await on(sessions[0]) { c, _ in try body(c) }
    }

    /// Runs `body` on the connection that claimed `zone`, or the run's when none did.
    @discardableResult
    func onConnection<T: Sendable>(of zone: ZoneID, _ body: @escaping @Sendable (Connection, Session) throws -> T) async throws -> T {
        let index = lock.withLock { sessionOfZone[zone] } ?? 0
        return try await on(sessions[index], body)
    }

    /// Runs `body` on `session`'s queue; `opening` connects the session first if it is new.
    private func on<T: Sendable>(
        _ session: Session, opening: Bool = false, _ body: @escaping @Sendable (Connection, Session) throws -> T
    ) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            session.queue.async {
                continuation.resume(
                    with: Result {
                        if opening {
                            try self.openConnection(session)
                            try self.prepareForBatches(session)
                        }
                        guard let connection = session.connection else {
                            throw PostgresError(kind: .connection, message: "the destination is not prepared")
                        }
                        return try body(connection, session)
                    })
            }
        }
    }

    public func close() async {
        for session in sessions {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                session.queue.async {
                    session.connection?.close()
                    session.connection = nil
                    continuation.resume()
                }
            }
        }
    }

    var key: String { "zonefeed:\(schema.schema):\(pipelineName)" }

    // MARK: Preparing

    /// Connects without creating anything (for `status`).
    public func connect() async throws {
        let session = sessions[0]
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            session.queue.async {
                continuation.resume(with: Result { try self.openConnection(session) })
            }
        }
    }

    private func openConnection(_ session: Session) throws {
        guard session.connection == nil else { return }
        let c = try Connection(conninfo)
        // The pipeline in application_name tells its sessions apart in pg_stat_activity.
        // Rows and their token commit together, so losing the last moment's commits in a server
        // crash loses nothing the next run does not fetch again.
        // Text goes over the wire as UTF-8 whatever the database's encoding.
        try c.execute("SET synchronous_commit = off; SET client_encoding = 'UTF8'")
        try c.query("SELECT set_config('application_name', $1, false)", [String("zonefeed/\(pipelineName)".prefix(63))])
        session.connection = c
    }

    /// A session's own staging tables and encoders, for applying batches.
    private func prepareForBatches(_ session: Session) throws {
        guard let c = session.connection, session.schemaVersion == nil else { return }
        try ready(session, for: schema, on: c)
        session.remadeInTransaction = false
    }

    /// Makes `session`'s staging tables and encoders fit `schema`, unless they do. Inside a
    /// transaction, the tables made come and go with it (`remadeInTransaction` says so).
    func ready(_ session: Session, for schema: PostgresSchema, on c: Connection) throws {
        guard session.schemaVersion != schema.version || session.encoders.count != schema.tables.count else { return }
        // pg_temp: never a table of the same name elsewhere on the search path.
        for i in 0..<session.stagingTableCount { try c.execute("DROP TABLE IF EXISTS pg_temp.zf_stage_\(i)") }
        for statement in schema.stagingDDL { try c.execute(statement) }
        session.encoders = schema.tables.map {
            RowEncoder(mapping: $0.mapping, keepUnmapped: self.settings.unmappedFields == .keep, evolving: self.settings.evolves)
        }
        session.schemaVersion = schema.version
        session.stagingTableCount = max(session.stagingTableCount, schema.tables.count)
        session.remadeInTransaction = true
    }

    /// Makes `schema` the one later batches start from, unless a newer one is known already.
    func publish(_ schema: PostgresSchema) {
        lock.withLock { if schema.version > _schema.version { _schema = schema } }
    }

    public func prepare() async throws {
        let schema = mappedSchema
        let session = sessions[0]
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            session.queue.async {
                continuation.resume(
                    with: Result {
                        try self.openConnection(session)
                        let c = session.connection!
                        try c.transaction {
                            // CREATE … IF NOT EXISTS is not safe against a concurrent creation of the
                            // same object; two runs starting together take turns here.
                            try c.query("SELECT pg_advisory_xact_lock(hashtext('zonefeed ddl'))")
                            let catalog = try PostgresSchema.Catalog.read(schema: schema.schema, on: c)
                            // A table of the same name but another shape is named before
                            // anything, the DDL included, is written.
                            let problems = schema.shapeProblems(given: catalog)
                            guard problems.isEmpty else { throw DestinationShapeError(problems: problems) }
                            for statement in schema.ddl(given: catalog) {
                                do {
                                    try c.execute(statement)
                                } catch let error as PostgresError {
                                    throw error.withContext("creating the destination tables in schema \(schema.schema)")
                                }
                            }
                            // The tables as earlier runs grew them, whether or not this one may
                            // grow them further: their rows are deleted, swept and merged whole.
                            let grown = try self.loadSchema(on: c)
                            let grownProblems = grown.shapeProblems(given: try PostgresSchema.Catalog.read(schema: schema.schema, on: c))
                            guard grownProblems.isEmpty else { throw DestinationShapeError(problems: grownProblems) }
                            self.publish(grown)
                        }
                        try self.prepareForBatches(session)
                    })
            }
        }
    }

    // MARK: Runs

    public func startRun() async throws -> Int64 {
        let schema = self.schema
        let pipelineName = pipelineName
        let key = self.key
        let id = try await onConnection { c -> Int64 in
            // A run killed without a word stays 'running'; its session lock is gone, which is how
            // it is told apart from a run still going on elsewhere.
            let stale = try c.query("SELECT run_id FROM \(schema.runs) WHERE pipeline = $1 AND status = 'running'", [pipelineName])
            for row in stale.rows {
                let id: String = try row.decode(0)
                let free = try c.query("SELECT pg_try_advisory_lock(hashtext($1), ($2::bigint % 2147483647)::integer)", ["\(key):run", id])
                if try free.scalar(as: Bool.self) {
                    try c.query(
                        """
                        UPDATE \(schema.runs) SET status = 'failed', finished_at = now(),
                            error = 'the process ended without recording an outcome (killed or crashed); the next run resumed from the last committed page'
                        WHERE run_id = $1 AND status = 'running'
                        """, [id])
                    try c.query("SELECT pg_advisory_unlock(hashtext($1), ($2::bigint % 2147483647)::integer)", ["\(key):run", id])
                }
            }
            // The row and the lock that says "alive" appear together (a session lock outlives the
            // COMMIT), so no other run can see the row without its lock and call it dead.
            return try c.transaction {
                let id = try c.query(
                    "INSERT INTO \(schema.runs) (pipeline, status, hostname, pid) VALUES ($1, 'running', $2, $3) RETURNING run_id",
                    [pipelineName, ProcessInfo.processInfo.hostName, String(getpid())]
                ).scalar(as: Int64.self)
                try c.query("SELECT pg_advisory_lock(hashtext($1), ($2::bigint % 2147483647)::integer)", ["\(key):run", String(id)])
                return id
            }
        }
        runID = id
        return id
    }

    public func finishRun(_ runID: Int64, status: RunStatus, error: String?, throttledSeconds: Double) async throws {
        let schema = self.schema
        try await onConnection { c in
            try c.query(
                "UPDATE \(schema.runs) SET status = $2, finished_at = now(), error = $3, throttled_seconds = $4 WHERE run_id = $1",
                [String(runID), status.rawValue, error.map(Self.withoutNUL), String(throttledSeconds)])
        }
    }

    // MARK: Account and database checkpoint

    public func storedAccount() async throws -> String? {
        let schema = self.schema
        let name = pipelineName
        return try await onConnection { c in
            try c.query(
                "SELECT account_user FROM \(schema.checkpoints) WHERE pipeline = $1 AND scope = 'database' AND zone_owner = '' AND zone_name = ''",
                [name]
            ).scalar
        }
    }

    public func storeAccount(_ user: String) async throws {
        let schema = self.schema
        let name = pipelineName
        try await onConnection { c in
            try c.query(
                """
                INSERT INTO \(schema.checkpoints) (pipeline, scope, account_user, pending) VALUES ($1, 'database', $2, false)
                ON CONFLICT (pipeline, scope, zone_owner, zone_name) DO UPDATE SET account_user = EXCLUDED.account_user
                """, [name, user])
        }
    }

    public func databaseCheckpoint() async throws -> ChangeToken? {
        let schema = self.schema
        let name = pipelineName
        return try await onConnection { c in
            try c.query(
                "SELECT token FROM \(schema.checkpoints) WHERE pipeline = $1 AND scope = 'database' AND zone_owner = '' AND zone_name = ''",
                [name]
            ).scalar.map(ChangeToken.init)
        }
    }

    public func applyDatabaseChanges(_ page: DatabaseChangePage, after previous: ChangeToken?, runID: Int64) async throws -> BatchOutcome? {
        let name = pipelineName
        let schema = self.schema
        let key = self.key
        return try await onConnection { c in
            try c.transaction { () -> BatchOutcome? in
                // Two runs reading the database feed take turns, and a run whose starting token
                // is stale stops: replaying old pages would replay old zone deletions.
                try c.query("SELECT pg_advisory_xact_lock(hashtext($1), hashtext('database feed'))", [key])
                let stored = try c.query(
                    "SELECT token FROM \(schema.checkpoints) WHERE pipeline = $1 AND scope = 'database' AND zone_owner = '' AND zone_name = ''",
                    [name]
                ).scalar
                guard stored == previous?.value else { return nil }
                var outcome = BatchOutcome()
                for deletion in page.deletedZones {
                    switch deletion.reason {
                    case .deleted, .purged:
                        outcome += try self.deleteZoneRows(deletion, runID: runID, on: c)
                    case .encryptedDataReset:
                        _ = try self.beginResync(deletion.zoneID, on: c)
                    }
                }
                for zone in page.modifiedZones {
                    try c.query(
                        """
                        INSERT INTO \(schema.checkpoints) (pipeline, scope, zone_owner, zone_name, pending) VALUES ($1, 'zone', $2, $3, true)
                        ON CONFLICT (pipeline, scope, zone_owner, zone_name)
                        DO UPDATE SET pending = true, pending_seq = \(schema.checkpoints).pending_seq + 1
                        """, [name, zone.ownerRecordName, zone.zoneName])
                }
                try c.query(
                    """
                    INSERT INTO \(schema.checkpoints) (pipeline, scope, token, pending) VALUES ($1, 'database', $2, false)
                    ON CONFLICT (pipeline, scope, zone_owner, zone_name) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
                    """, [name, page.syncToken.value])
                try self.addToRun(outcome, on: c)
                return outcome
            }
        }
    }

    public func pendingZones() async throws -> [ZoneID] {
        let schema = self.schema
        let name = pipelineName
        return try await onConnection { c in
            try c.query(
                """
                SELECT zone_owner, zone_name FROM \(schema.checkpoints)
                WHERE pipeline = $1 AND scope = 'zone' AND (pending OR resyncing)
                ORDER BY zone_name, zone_owner
                """, [name]
            ).rows.map { ZoneID(zoneName: try $0.decode(1), ownerRecordName: try $0.decode(0)) }
        }
    }

    // MARK: Zones

    /// Claims the zone on the session that holds the fewest zones (the first of those), opening
    /// its connection if it is new; the zone's work then goes to that session until it is
    /// released. A session applies its zones' batches one after another: zones fetched from far
    /// away outnumber the connections, which are needed only for writing.
    public func claimZone(_ zone: ZoneID) async throws -> Bool {
        let key = self.key
        let index = lock.withLock { () -> Int in
            var load = [Int](repeating: 0, count: sessions.count)
            for session in sessionOfZone.values { load[session] += 1 }
            let least = sessions.indices.min { load[$0] < load[$1] } ?? 0
            sessionOfZone[zone] = least
            return least
        }
        let claimed: Bool
        do {
            claimed = try await on(sessions[index], opening: true) { c, _ in
                // > pg_try_advisory_lock: "Obtains an exclusive session-level advisory lock if
                // > available. This will either obtain the lock immediately and return true, or
                // > return false without waiting if the lock cannot be acquired immediately."
                try c.query("SELECT pg_try_advisory_lock(hashtext($1), hashtext($2))", [key, "\(zone.ownerRecordName)/\(zone.zoneName)"]).scalar(as: Bool.self)
            }
        } catch {
            lock.withLock { sessionOfZone[zone] = nil }
            throw error
        }
        if !claimed { lock.withLock { sessionOfZone[zone] = nil } }
        return claimed
    }

    public func releaseZone(_ zone: ZoneID) async throws {
        let key = self.key
        defer { lock.withLock { sessionOfZone[zone] = nil } }
        try await onConnection(of: zone) { c, _ in
            try c.query("SELECT pg_advisory_unlock(hashtext($1), hashtext($2))", [key, "\(zone.ownerRecordName)/\(zone.zoneName)"])
        }
    }

    public func zoneCheckpoint(_ zone: ZoneID) async throws -> ZoneCheckpoint {
        let schema = self.schema
        let name = pipelineName
        return try await onConnection(of: zone) { c, _ in
            let row = try c.query(
                """
                INSERT INTO \(schema.checkpoints) (pipeline, scope, zone_owner, zone_name) VALUES ($1, 'zone', $2, $3)
                ON CONFLICT (pipeline, scope, zone_owner, zone_name) DO UPDATE SET pipeline = EXCLUDED.pipeline
                RETURNING token, generation, resyncing, pending_seq
                """, [name, zone.ownerRecordName, zone.zoneName]
            ).rows[0]
            let seenPendingSeq: String = try row.decode(3)
            self.updateState(of: zone) { $0.seenPendingSeq = seenPendingSeq }
            return ZoneCheckpoint(
                token: try row.decode(0, as: String?.self).map(ChangeToken.init), generation: try row.decode(1),
                resyncing: try row.decode(2))
        }
    }

    public func beginResync(_ zone: ZoneID, reason: String) async throws -> ZoneCheckpoint {
        try await onConnection(of: zone) { c, _ in try self.beginResync(zone, on: c) }
    }

    func beginResync(_ zone: ZoneID, on c: Connection) throws -> ZoneCheckpoint {
        let row = try c.query(
            """
            INSERT INTO \(schema.checkpoints) (pipeline, scope, zone_owner, zone_name, token, generation, resyncing, pending)
            VALUES ($1, 'zone', $2, $3, NULL, 1, true, true)
            ON CONFLICT (pipeline, scope, zone_owner, zone_name) DO UPDATE
                SET token = NULL, generation = \(schema.checkpoints).generation + 1, resyncing = true, pending = true,
                    pending_seq = \(schema.checkpoints).pending_seq + 1, updated_at = now()
            RETURNING generation, pending_seq
            """, [pipelineName, zone.ownerRecordName, zone.zoneName]
        ).rows[0]
        let seenPendingSeq: String = try row.decode(1)
        updateState(of: zone) { $0.seenPendingSeq = seenPendingSeq }
        return ZoneCheckpoint(token: nil, generation: try row.decode(0), resyncing: true)
    }

    /// PostgreSQL text holds no NUL: a zone named with one is not followed (stored cut at the
    /// NUL, `a\u{0}one` and `a\u{0}two` would both be `a`).
    public func refusal(of zone: ZoneID) -> String? {
        guard zone.zoneName.containsNUL || zone.ownerRecordName.containsNUL else { return nil }
        return "the zone's name holds a NUL character, which PostgreSQL text cannot hold; the zone is not exported "
            + "(stored cut at the NUL, it would share its rows and checkpoint with another zone)"
    }

    public func recordZoneError(_ zone: ZoneID, message: String?) async throws {
        let schema = self.schema
        let name = pipelineName
        try await onConnection(of: zone) { c, _ in
            try c.query(
                "UPDATE \(schema.checkpoints) SET last_error = $4 WHERE pipeline = $1 AND scope = 'zone' AND zone_owner = $2 AND zone_name = $3",
                [name, zone.ownerRecordName, zone.zoneName, message.map(Self.withoutNUL)])
        }
    }

    public func deleteZone(_ deletion: ZoneDeletion, runID: Int64) async throws -> BatchOutcome {
        try await onConnection(of: deletion.zoneID) { c, _ in
            try c.transaction {
                let outcome = try self.deleteZoneRows(deletion, runID: runID, on: c)
                try self.addToRun(outcome, on: c)
                return outcome
            }
        }
    }

    /// Tombstones (reason `zone_deleted`) or deletes (`zone_purged`, or `deletes: hard`) every row
    /// of a zone, logs each in `zonefeed_tombstones`, and drops the zone's checkpoint.
    func deleteZoneRows(_ deletion: ZoneDeletion, runID: Int64, on c: Connection) throws -> BatchOutcome {
        let purge = deletion.reason == .purged
        let reason = purge ? "zone_purged" : "zone_deleted"
        var outcome = BatchOutcome()
        for table in try refreshed(schema, on: c).tables {
            // Only rows that were live are logged: a tombstoned row's deletion was logged already.
            let change =
                purge || settings.deletes == .hard
                ? "DELETE FROM \(table.qualifiedName) WHERE zone_owner = $1 AND zone_name = $2 RETURNING record_name, record_type, deleted_at IS NULL AS was_live"
                : "UPDATE \(table.qualifiedName) SET deleted_at = now(), synced_at = now(), run_id = $3::bigint WHERE zone_owner = $1 AND zone_name = $2 AND deleted_at IS NULL RETURNING record_name, record_type, true AS was_live"
            let result = try c.query(
                """
                WITH gone AS (\(change))
                INSERT INTO \(schema.tombstones) (pipeline, zone_owner, zone_name, record_name, record_type, reason, run_id)
                SELECT $4, $1, $2, record_name, record_type, $5, $3::bigint FROM gone WHERE was_live
                """, [deletion.zoneID.ownerRecordName, deletion.zoneID.zoneName, String(runID), pipelineName, reason])
            outcome.tombstones += result.affectedRows
        }
        try c.query(
            "DELETE FROM \(schema.checkpoints) WHERE pipeline = $1 AND scope = 'zone' AND zone_owner = $2 AND zone_name = $3",
            [pipelineName, deletion.zoneID.ownerRecordName, deletion.zoneID.zoneName])
        return outcome
    }

    func addToRun(_ outcome: BatchOutcome, on c: Connection) throws {
        try c.query(
            """
            UPDATE \(schema.runs) SET pages = pages + $2, upserts = upserts + $3, tombstones = tombstones + $4,
                rejects = rejects + $5, skipped = skipped + $6
            WHERE run_id = $1
            """,
            [
                String(runID), String(outcome.pages), String(outcome.upserts), String(outcome.tombstones + outcome.swept),
                String(outcome.rejects), String(outcome.skipped),
            ])
    }
}
