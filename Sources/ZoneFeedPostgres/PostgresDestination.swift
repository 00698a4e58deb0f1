import CloudKitModel
import Dispatch
import Foundation
import LibPQ
import Logging
import Synchronization
import ZoneFeed

/// The PostgreSQL destination. Each libpq connection is used from a dedicated serial queue so that
/// blocking calls never sit on Swift's cooperative pool. The first connection holds the run's
/// liveness lock and does the run-wide work; a zone is applied on the connection that claimed it
/// (its session holds the zone's advisory lock), one of up to `parallelZones`, opened when first
/// needed; a session may hold several zones. The session locks vanish if the process dies.
public final class PostgresDestination: RunDestination, Sendable {
    /// The tables as this process last knew them: the pipeline's mapping, grown by the
    /// recorded schema changes when the schema evolves.
    public var schema: PostgresSchema { state.withLock { $0.schema } }
    /// The pipeline's own mapping, before any change.
    let mappedSchema: PostgresSchema
    let pipelineName: String
    let limits: Limits

    /// What the destination keeps within, so that PostgreSQL never refuses a batch at every try.
    struct Limits: Sendable {
        /// What PostgreSQL's jsonb takes of a reject's entry (`zonefeed_rejects.raw`).
        var rejectsJSONB = JSONBLimits()
        /// The most tables a pipeline has for evolution to make one more: each table a batch
        /// makes holds about four of PostgreSQL's locks until it commits (the table, its TOAST
        /// table and index, its key), and the server's lock table has room for 6,400 by default
        /// (`max_locks_per_transaction` 64 × `max_connections` 100), shared by every session:
        /// one transaction making 1,607 tables ran out of it ("out of shared memory"). A server
        /// sending records of ever new types would otherwise fail its batch at every try, or
        /// fill the database with tables.
        var tables = 500
        /// The most record names held at once for zones copied straight into their tables
        /// (`DirectNames`, 11 to 21 bytes each, so at most about 64 MB): past it, a zone that
        /// would add more is merged.
        var directNames = 3_000_000
    }
    let settings: PostgresSettings
    /// The libpq connection string: it may hold a password; never print it.
    public let conninfo: String
    let logger: Logger
    /// The hash of record names in batches (`RecordNameRepeats`, `DirectNames`), one seed for
    /// the run so that the names of one batch are found in those of the batches before it.
    let nameHash = SeededByteHash()

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
        /// The staging tables (by record type's index) it has made for `schemaVersion`, and
        /// those of them made in the transaction still open, which a rollback takes back.
        var stagingMade: Set<Int> = []
        var stagingMadeInTransaction: Set<Int> = []

        /// The transaction still open has ended: committed, or rolled back.
        func transactionEnded(committed: Bool) {
            if !committed {
                if remadeInTransaction { schemaVersion = nil }
                stagingMade.subtract(stagingMadeInTransaction)
            }
            remadeInTransaction = false
            stagingMadeInTransaction = []
        }

        init(index: Int) {
            queue = DispatchQueue(label: "zonefeed.postgres.\(index)")
        }
    }

    /// `sessions[0]` is the run's; the others are for zones applied at the same time. The pool
    /// (the sessions, which zone is on which, and `on`) is the destination's own; its roles
    /// (runs, zones, applying batches, evolution, admin) are extensions in files of their own.
    let sessions: [Session]
    /// What the pool and its roles share between calls.
    struct State {
        /// The session each claimed zone is applied on.
        var sessionOfZone: [ZoneID: Int] = [:]
        /// How many batches each session is applying or has been given to apply.
        var batchesOnSession: [Int]
        var zones: [ZoneID: ZoneState] = [:]
        var runID: Int64 = 0
        var schema: PostgresSchema
        /// Of each zone copied straight into its tables, the names copied so far, and how many
        /// they are in all.
        var directNames: [ZoneID: DirectNames] = [:]
        var directNameCount = 0
    }
    let state: Mutex<State>

    /// What this run knows of a zone it applies.
    struct ZoneState {
        /// The `pending_seq` this run read with the checkpoint: the zone's last batch clears
        /// `pending` only if no database-feed notice came in since.
        var seenPendingSeq: String?
        /// The checkpoint row's `incarnation` this run read: a batch commits only into that row,
        /// not into one made since for a zone of the same name (deleted and made again).
        var incarnation: String?
        /// Per table name: whether batches are copied straight into the table. True while the
        /// zone had no rows in the table when this run first applied it and no copy has met a
        /// row already there; a merge through the staging table otherwise.
        var copiesDirectly: [String: Bool] = [:]
        /// The tables that may hold rows of the zone: those that held some when this run first
        /// applied the zone, and those its batches wrote to since.
        var mayHoldRows: Set<String> = []
        /// Moves on each time the zone stops being copied straight into its tables: a batch that
        /// chose to copy so under an earlier count is applied again, merging.
        var directEpoch = 0
        /// A batch was copied straight into the tables without noting its names (one table,
        /// where no name can be met under another).
        var copiedWithoutNames = false
    }

    /// The destination of a pipeline whose destination is PostgreSQL; throws when it is another.
    public convenience init(pipeline: Pipeline, conninfo: String, logger: Logger) throws {
        self.init(pipelineName: pipeline.name, settings: try pipeline.postgresSettings(), conninfo: conninfo, logger: logger)
    }

    public convenience init(pipelineName: String, settings: PostgresSettings, conninfo: String, logger: Logger) {
        self.init(pipelineName: pipelineName, settings: settings, conninfo: conninfo, logger: logger, limits: Limits())
    }

    /// `limits`: lowered by tests.
    init(pipelineName: String, settings: PostgresSettings, conninfo: String, logger: Logger, limits: Limits) {
        self.limits = limits
        self.pipelineName = pipelineName
        self.settings = settings
        mappedSchema = PostgresSchema(pipelineName: pipelineName, settings: settings)
        state = Mutex(State(batchesOnSession: Array(repeating: 0, count: max(1, settings.parallelZones)), schema: mappedSchema))
        self.conninfo = conninfo
        self.logger = logger
        sessions = (0..<max(1, settings.parallelZones)).map(Session.init)
    }

    var runID: Int64 {
        get { state.withLock { $0.runID } }
        set { state.withLock { $0.runID = newValue } }
    }

    func state(of zone: ZoneID) -> ZoneState {
        state.withLock { $0.zones[zone] ?? ZoneState() }
    }

    func updateState(of zone: ZoneID, _ change: (inout ZoneState) -> Void) {
        state.withLock { change(&$0.zones[zone, default: ZoneState()]) }
    }

    /// Runs `body` on the run's connection.
    @discardableResult
    func onConnection<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        try await on(sessions[0]) { c, _ in try body(c) }
    }

    /// Runs `body` on the connection that claimed `zone`, or the run's when none did.
    @discardableResult
    func onConnection<T: Sendable>(of zone: ZoneID, _ body: @escaping @Sendable (Connection, Session) throws -> T) async throws -> T {
        let index = state.withLock { $0.sessionOfZone[zone] } ?? 0
        return try await on(sessions[index], body)
    }

    /// Runs `body` on `session`'s queue; `opening` connects the session first if it is new.
    func on<T: Sendable>(
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
        // Batches written alongside, a zone's deletion after another run's last batch, and
        // merges that check rows again rely on READ COMMITTED: a database (or role) whose default
        // is REPEATABLE READ or SERIALIZABLE failed such a zone with 40001 instead.
        try c.execute("SET synchronous_commit = off; SET client_encoding = 'UTF8'; SET default_transaction_isolation = 'read committed'")
        try c.query("SELECT set_config('application_name', $1, false)", [String("zonefeed/\(pipelineName)".prefix(63))])
        session.connection = c
    }

    /// A session's own staging tables and encoders, for applying batches.
    private func prepareForBatches(_ session: Session) throws {
        guard let c = session.connection, session.schemaVersion == nil else { return }
        // In one transaction: each statement on its own committed, and every commit empties
        // every ON COMMIT DELETE ROWS table made before it, so making one a record type took
        // time in the square of their number (150 types: 39 s before a run could start).
        do {
            try c.transaction { try ready(session, for: schema, on: c) }
            session.transactionEnded(committed: true)
        } catch {
            session.transactionEnded(committed: false)
            throw error
        }
    }

    /// Makes `session`'s staging tables and encoders fit `schema`, unless they do. Inside a
    /// transaction, the tables made come and go with it (`remadeInTransaction` says so).
    func ready(_ session: Session, for schema: PostgresSchema, on c: Connection) throws {
        guard session.schemaVersion != schema.version || session.encoders.count != schema.tables.count else { return }
        // pg_temp: never a table of the same name elsewhere on the search path.
        for i in 0..<session.stagingTableCount { try c.execute("DROP TABLE IF EXISTS pg_temp.zf_stage_\(i)") }
        for statement in PostgresSchema.sessionTablesDDL { try c.execute(statement) }
        session.stagingMade = []
        session.stagingMadeInTransaction = []
        session.encoders = schema.tables.map {
            RowEncoder(mapping: $0.mapping, keepUnmapped: self.settings.policies.unmappedFields == .keep, evolving: self.settings.evolves)
        }
        session.schemaVersion = schema.version
        session.stagingTableCount = max(session.stagingTableCount, schema.tables.count)
        session.remadeInTransaction = true
    }

    /// Makes the session's staging table of `schema.tables[t]` unless it has it, in the open
    /// transaction.
    func stage(_ t: Int, of schema: PostgresSchema, session: Session, on c: Connection) throws {
        guard !session.stagingMade.contains(t) else { return }
        try c.execute(schema.stagingTableDDL(schema.tables[t]))
        session.stagingMade.insert(t)
        session.stagingMadeInTransaction.insert(t)
    }

    /// Makes `schema` the one later batches start from, unless a newer one is known already.
    func publish(_ schema: PostgresSchema) {
        state.withLock { if schema.version > $0.schema.version { $0.schema = schema } }
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
                        let encoding = try c.query(
                            "SELECT current_database(), pg_encoding_to_char(encoding) FROM pg_database WHERE datname = current_database()"
                        ).rows.first
                        if let encoding, let name = encoding[1], !DestinationEncodingError.accepted.contains(name) {
                            throw DestinationEncodingError(database: encoding[0] ?? "", encoding: name)
                        }
                        // A table's change waits for its readers, and its readers after it wait
                        // for it: as in evolution, it waits a few seconds at a time, and the
                        // readers queued behind it get the table when it gives up.
                        for attempt in 1... {
                            do {
                                try self.prepareSchema(schema, on: c)
                                break
                            } catch let error as PostgresError where error.sqlState == "55P03" {
                                // > lock_not_available: 55P03.
                                guard attempt < Self.prepareLockAttempts else {
                                    throw error.withContext(
                                        "changing the destination tables in schema \(schema.schema): waited \(Self.evolutionLockTimeout) for a table "
                                            + "\(attempt) times: a long query holds it (pg_stat_activity shows which); nothing was changed, and the next run tries again"
                                    )
                                }
                            }
                        }
                        try self.prepareForBatches(session)
                    })
            }
        }
    }

    /// How many times `prepare` waits `evolutionLockTimeout` for a table it must change.
    static let prepareLockAttempts = 4

    /// Makes what `schema` lacks, in one transaction, and publishes the tables as earlier runs
    /// grew them.
    private func prepareSchema(_ schema: PostgresSchema, on c: Connection) throws {
        try c.transaction {
            var catalog = try PostgresSchema.Catalog.read(schema: schema.schema, on: c)
            // Two runs starting together take turns at making what is missing, and
            // the second reads again what the first made. A schema that lacks
            // nothing (every run once the tables are made, unless the mapping has
            // changed since: every cycle of a watcher) takes no lock: whoever holds
            // it may be making tables for a long while (an evolution holds it to
            // its batch's end).
            var statements = schema.ddl(given: catalog)
            if !statements.isEmpty {
                try PostgresSchema.lockDDL(of: schema.schema, on: c)
                catalog = try PostgresSchema.Catalog.read(schema: schema.schema, on: c)
                statements = schema.ddl(given: catalog)
            }
            // A table of the same name but another shape is named before
            // anything, the DDL included, is written.
            let problems = schema.shapeProblems(given: catalog)
            guard problems.isEmpty else { throw DestinationShapeError(problems: problems) }
            if !statements.isEmpty { try c.execute("SET LOCAL lock_timeout = '\(Self.evolutionLockTimeout)'") }
            for statement in statements {
                do {
                    try c.execute(statement)
                } catch let error as PostgresError {
                    throw error.withContext("creating the destination tables in schema \(schema.schema)")
                }
            }
            if !statements.isEmpty { try c.execute("SET LOCAL lock_timeout TO DEFAULT") }
            // The tables as earlier runs grew them, whether or not this one may
            // grow them further: their rows are deleted, swept and merged whole.
            let grown = try self.loadSchema(on: c)
            // Each of them this pipeline's alone; the ones made just now free
            // of any claim left by a table of their name dropped since.
            let made = Set(schema.tables.map(\.mapping.table).filter { catalog.columns[$0] == nil })
            try grown.claimTables(grown.tables.map(\.mapping.table), made: made, on: c)
            // The catalog is read after the schema's changes, always: another
            // process may have grown a table since the read above.
            let grownProblems = grown.shapeProblems(given: try PostgresSchema.Catalog.read(schema: schema.schema, on: c))
            guard grownProblems.isEmpty else { throw DestinationShapeError(problems: grownProblems) }
            self.publish(grown)
        }
    }
}
