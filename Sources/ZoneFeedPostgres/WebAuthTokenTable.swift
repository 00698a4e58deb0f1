import Foundation
import LibPQ
import Synchronization
import ZoneFeed

/// `zonefeed_web_auth_tokens` in the destination's schema: the CloudKit web auth tokens of a
/// pipeline whose runs do not keep a disk (a Kubernetes CronJob's pod), one row per pipeline,
/// holding the token file's text (`auth.webAuthTokenStore: database`). Whoever can read the
/// table can act as the CloudKit user until the token expires, so it is created with no
/// privilege for PUBLIC; see docs/cloudkit.md, "Web auth tokens".
///
/// Every `save` is a committed statement before it returns, and PostgreSQL's default
/// `synchronous_commit = on` makes a commit durable: the same rule as the file (saved before a
/// request relies on it), with a power loss covered too. Calls block; the token store makes
/// them from its own queue, one at a time.
public final class WebAuthTokenTable: SourceVault, Sendable {
    public let pipelineName: String
    let schema: String
    let conninfo: String
    private let table: String
    /// The table's connection, once opened, and whether the table is known to exist.
    private let state = Mutex<(connection: Connection?, created: Bool)>((nil, false))

    public init(pipelineName: String, schema: String, conninfo: String) {
        self.pipelineName = pipelineName
        self.schema = schema
        self.conninfo = conninfo
        table = "\(quoteIdentifier(schema)).\(quoteIdentifier(Self.tableName))"
    }

    public static let tableName = "zonefeed_web_auth_tokens"

    /// Where the tokens are, for messages: never a token.
    public var location: String { "table \(schema).\(Self.tableName), row '\(pipelineName)'" }

    /// The saved text; nil when this pipeline has saved nothing yet.
    public func load() throws -> String? {
        try withConnection(doing: "reading the web auth tokens from \(location)") { c in
            try c.query("SELECT tokens FROM \(table) WHERE pipeline = $1", [pipelineName]).rows.first?.decode(0, as: String.self)
        }
    }

    /// Replaces the saved text; committed when this returns.
    public func save(_ text: String) throws {
        try withConnection(doing: "saving the web auth tokens in \(location)") { c in try upsert(text, on: c) }
    }

    private func upsert(_ text: String, on c: Connection) throws {
        _ = try c.query(
            """
            INSERT INTO \(table) (pipeline, tokens, updated_at) VALUES ($1, $2, now())
            ON CONFLICT (pipeline) DO UPDATE SET tokens = EXCLUDED.tokens, updated_at = EXCLUDED.updated_at
            """, [pipelineName, text])
    }

    /// Reads, changes and replaces the saved text in one transaction, holding a lock on the
    /// pipeline's tokens: two processes saving at once each keep what the other saved.
    public func update(_ change: (String?) throws -> String) throws {
        try withConnection(doing: "saving the web auth tokens in \(location)") { c in
            try c.transaction {
                try c.query("SELECT pg_advisory_xact_lock(hashtext('zonefeed web auth tokens'), hashtext($1))", [pipelineName])
                let saved = try c.query("SELECT tokens FROM \(table) WHERE pipeline = $1", [pipelineName]).rows.first?.decode(0, as: String.self)
                try upsert(change(saved), on: c)
            }
        }
    }

    public func close() {
        state.withLock { state in
            state.connection?.close()
            state.connection = nil
        }
    }

    /// Runs `body` on the table's connection, opened (and the table created) when first needed;
    /// a connection that failed is opened again once, as a restarted server needs.
    private func withConnection<T: Sendable>(doing what: String, _ body: (Connection) throws -> T) throws -> T {
        try state.withLock { state in
            var attempt = 0
            while true {
                attempt += 1
                do {
                    let c = try state.connection ?? Connection(conninfo)
                    state.connection = c
                    if !state.created {
                        try createTable(on: c)
                        state.created = true
                    }
                    return try body(c)
                } catch let error as PostgresError {
                    state.connection?.close()
                    state.connection = nil
                    if attempt >= 2 { throw error.withContext(what) }
                }
            }
        }
    }

    private func createTable(on c: Connection) throws {
        // Made once: a process that finds it takes no lock (the schema's DDL lock may be held
        // for a while by a pipeline evolving its tables).
        let exists = try c.query("SELECT to_regclass($1) IS NOT NULL", [table]).scalar(as: Bool.self)
        guard !exists else { return }
        try c.transaction {
            // The destination's DDL lock: CREATE … IF NOT EXISTS races with a concurrent creation.
            try PostgresSchema.lockDDL(of: schema, on: c)
            try c.execute("CREATE SCHEMA IF NOT EXISTS \(quoteIdentifier(schema))")
            try c.execute(
                """
                CREATE TABLE IF NOT EXISTS \(table) (
                    pipeline text PRIMARY KEY,
                    tokens text NOT NULL,
                    updated_at timestamptz NOT NULL DEFAULT now()
                )
                """)
            try c.execute("REVOKE ALL ON \(table) FROM PUBLIC")
        }
    }
}
