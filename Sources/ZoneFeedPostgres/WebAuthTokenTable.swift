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
                    let c: Connection
                    if let open = state.connection {
                        c = open
                    } else {
                        c = try Connection(conninfo)
                        // Its reads and writes take turns on a lock, as READ COMMITTED allows:
                        // under a REPEATABLE READ or SERIALIZABLE default, two processes saving
                        // at once failed with 40001.
                        _ = try c.execute("SET default_transaction_isolation = 'read committed'")
                        state.connection = c
                    }
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
        guard !exists else { return try checkPrivate(on: c) }
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
            // What `ALTER DEFAULT PRIVILEGES` grants on every new table (a warehouse's readers,
            // say) is taken back from this one: the table was readable by them from its first
            // token, and only a later process, finding it made, refused it. Then it is checked
            // as one found made is (another role may have made it since it was looked for).
            let grantees = try c.query(
                """
                SELECT DISTINCT pg_get_userbyid(a.grantee) FROM pg_class t, aclexplode(t.relacl) a
                WHERE t.oid = to_regclass($1) AND t.relowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)
                    AND a.grantee NOT IN (0, t.relowner)
                """, [table])
            for row in grantees.rows { try c.execute("REVOKE ALL ON \(table) FROM \(quoteIdentifier(try row.decode(0, as: String.self)))") }
            try checkPrivate(on: c)
        }
    }

    /// Refuses a table found already made unless it is as zonefeed makes it: owned by the role
    /// the pipeline connects as, no privilege for another, no trigger. A role that may create
    /// tables in the schema could make it first, granted to itself or with a trigger, and
    /// collect every token saved there; the table was taken as found.
    private func checkPrivate(on c: Connection) throws {
        let row = try c.query(
            """
            SELECT pg_get_userbyid(t.relowner), t.relowner = (SELECT oid FROM pg_roles WHERE rolname = current_user), current_user,
                coalesce((SELECT string_agg(DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END, ', ')
                          FROM aclexplode(t.relacl) a WHERE a.grantee <> t.relowner), ''),
                EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid = t.oid AND NOT g.tgisinternal)
            FROM pg_class t WHERE t.oid = to_regclass($1)
            """, [table]
        ).rows.first
        guard let row else { return }
        let (owner, owned, user, grantees, triggers): (String, Bool, String, String, Bool) = (
            try row.decode(0), try row.decode(1), try row.decode(2), try row.decode(3), try row.decode(4)
        )
        let named = "the web auth token table \(schema).\(Self.tableName)"
        if !owned {
            throw WebAuthTokenTableRefusal(
                description: "\(named) belongs to role \(owner), not to \(user), the role the pipeline connects as: its owner could read every "
                    + "token saved there. Drop it (DROP TABLE \(table)), and the next run makes it for \(user) alone")
        }
        if !grantees.isEmpty {
            throw WebAuthTokenTableRefusal(
                description: "\(named) grants privileges to \(grantees), who could read every token saved there: REVOKE ALL ON \(table) "
                    + "FROM \(grantees), or drop the table and let the next run make it")
        }
        if triggers {
            throw WebAuthTokenTableRefusal(
                description: "\(named) has triggers, which could copy every token saved there elsewhere: drop them, or drop the table and "
                    + "let the next run make it")
        }
    }
}

/// The web auth token table is not as zonefeed makes it: a sentence that says how it could leak
/// the tokens and what to do, never a token.
public struct WebAuthTokenTableRefusal: Error, Sendable, CustomStringConvertible {
    public var description: String
}
