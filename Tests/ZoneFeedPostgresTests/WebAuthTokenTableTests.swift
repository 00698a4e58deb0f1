import Dispatch
import Foundation
import LibPQ
import Synchronization
import TestSupport
import Testing
import ZoneFeedPostgres

/// The table of web auth tokens that the replicas of a Deployment share
/// (`auth.webAuthTokenStore: database`).
@Suite struct WebAuthTokenTableTests {
    /// One process's update under way, another's arrives: the second waits for the first's
    /// commit, reads what it saved and keeps it. The overlap is made, not hoped for: the first
    /// holds its transaction open until PostgreSQL shows the second's session waiting for it.
    @Test func anUpdateThatArrivesDuringAnotherKeepsWhatTheOtherSaved() async throws {
        let conninfo = try await TestDatabase.connectionString()
        let schema = TestDatabase.uniqueName("tokens")
        let second = "zonefeed-test-\(schema)"
        let first = WebAuthTokenTable(pipelineName: "shared", schema: schema, conninfo: conninfo)
        let other = WebAuthTokenTable(pipelineName: "shared", schema: schema, conninfo: Self.conninfo(conninfo, applicationName: second))
        defer {
            first.close()
            other.close()
        }
        // Blocking libpq calls and semaphores: on threads of their own, off the cooperative pool
        // (not on Dispatch's global queue, whose threads on Linux are the cooperative pool's).
        let (secondWaited, failures) = await withCheckedContinuation { (done: CheckedContinuation<(Bool, [String]), Never>) in
            Thread.detachNewThread {
                var failures: [String] = []
                var waited = false
                let secondDone = DispatchSemaphore(value: 0)
                let secondFailure = Mutex<String?>(nil)
                do {
                    try first.save("start\n")
                    try first.update { saved in
                        Thread.detachNewThread {
                            do { try other.update { ($0 ?? "") + "second\n" } } catch { secondFailure.withLock { $0 = "\(error)" } }
                            secondDone.signal()
                        }
                        waited = Self.until(.seconds(30)) { try Self.isWaitingForALock(applicationName: second, conninfo: conninfo) }
                        return (saved ?? "") + "first\n"
                    }
                } catch {
                    failures.append("\(error)")
                }
                secondDone.wait()
                if let failure = secondFailure.withLock({ $0 }) { failures.append(failure) }
                done.resume(returning: (waited, failures))
            }
        }
        #expect(failures == [])
        #expect(secondWaited, "the second update waited for the first's transaction")
        #expect(try first.load() == "start\nfirst\nsecond\n", "the second read what the first saved, and kept it")
    }

    /// A table of that name found already made is used only as zonefeed makes it: owned by the
    /// role the pipeline connects as, with no privilege for another and no trigger. A role that
    /// may create tables in the schema could make it first, granted to itself or with a
    /// trigger, and collect every token; it was taken as found. Nothing is saved in such a one.
    @Test(arguments: ["granted to PUBLIC", "with a trigger", "of another role"])
    func aTokenTableMadeByAnotherOrOpenToOthersIsRefused(_ how: String) async throws {
        let conninfo = try await TestDatabase.connectionString()
        let schema = TestDatabase.uniqueName("tokentrap")
        let role = "zf_other_" + schema.suffix(12).filter { $0.isLetter || $0.isNumber }
        let qualified = "\(quoteIdentifier(schema)).\(quoteIdentifier(WebAuthTokenTable.tableName))"
        try Connection.withConnection(conninfo) { c in
            try c.execute("CREATE SCHEMA \(quoteIdentifier(schema))")
            try c.execute("CREATE TABLE \(qualified) (pipeline text PRIMARY KEY, tokens text NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())")
            switch how {
            case "granted to PUBLIC":
                try c.execute("GRANT SELECT ON \(qualified) TO PUBLIC")
            case "with a trigger":
                try c.execute("CREATE FUNCTION \(quoteIdentifier(schema)).copy() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END'")
                try c.execute("CREATE TRIGGER copy BEFORE INSERT ON \(qualified) FOR EACH ROW EXECUTE FUNCTION \(quoteIdentifier(schema)).copy()")
            default:
                try c.execute("CREATE ROLE \(role) NOLOGIN")
                try c.execute("ALTER TABLE \(qualified) OWNER TO \(role)")
            }
        }
        let tokens = WebAuthTokenTable(pipelineName: "trapped", schema: schema, conninfo: conninfo)
        let refusal = #expect(throws: WebAuthTokenTableRefusal.self) { try tokens.save("secret-token\n") }
        tokens.close()
        let said =
            switch how {
            case "granted to PUBLIC": "grants privileges to PUBLIC, who could read every token saved there"
            case "with a trigger": "has triggers, which could copy every token saved there elsewhere"
            default: "belongs to role \(role), not to "
            }
        #expect(refusal?.description.contains(said) == true, "\(String(describing: refusal))")
        let saved = try Connection.withConnection(conninfo) { c in
            let count = try c.query("SELECT count(*) FROM \(qualified)").scalar
            try c.execute("DROP SCHEMA \(quoteIdentifier(schema)) CASCADE")
            if how == "of another role" { try c.execute("DROP ROLE \(role)") }
            return count
        }
        #expect(saved == "0", "nothing was saved in it")
    }

    /// The table zonefeed makes is private from its first token, whatever privileges the
    /// database grants on new tables (`ALTER DEFAULT PRIVILEGES … GRANT SELECT ON TABLES TO
    /// analysts`, as warehouses do): it was readable by them until a later process refused it.
    @Test func theTableIsMadePrivateWhateverNewTablesAreGranted() async throws {
        let conninfo = try await TestDatabase.connectionString()
        let schema = TestDatabase.uniqueName("tokengrant")
        let role = "zf_reader_" + schema.suffix(12).filter { $0.isLetter || $0.isNumber }
        let qualified = "\(quoteIdentifier(schema)).\(quoteIdentifier(WebAuthTokenTable.tableName))"
        try Connection.withConnection(conninfo) { c in
            try c.execute("CREATE ROLE \(role) NOLOGIN")
            try c.execute("CREATE SCHEMA \(quoteIdentifier(schema))")
            try c.execute("ALTER DEFAULT PRIVILEGES IN SCHEMA \(quoteIdentifier(schema)) GRANT SELECT, UPDATE ON TABLES TO \(role)")
        }
        // The role is the cluster's: dropped whatever happens below.
        defer {
            try? Connection.withConnection(conninfo) { c in
                _ = try? c.execute("DROP SCHEMA \(quoteIdentifier(schema)) CASCADE")
                _ = try? c.execute("DROP ROLE \(role)")
            }
        }
        let tokens = WebAuthTokenTable(pipelineName: "granted", schema: schema, conninfo: conninfo)
        try tokens.save("secret-token\n")
        tokens.close()
        let (reads, grantees, again) = try Connection.withConnection(conninfo) { c in
            let reads = try c.query("SELECT has_table_privilege($1, $2, 'SELECT')", [role, qualified]).scalar(as: Bool.self)
            let grantees = try c.query(
                "SELECT count(*) FROM pg_class t, aclexplode(t.relacl) a WHERE t.oid = to_regclass($1) AND a.grantee <> t.relowner", [qualified]
            ).scalar
            // The next process finds it made, and takes it.
            let next = WebAuthTokenTable(pipelineName: "granted", schema: schema, conninfo: conninfo)
            defer { next.close() }
            return (reads, grantees, try next.load())
        }
        #expect(!reads, "\(role) may not read the tokens")
        #expect(grantees == "0")
        #expect(again == "secret-token\n")
    }

    /// `conninfo` with an application name, whichever form it has.
    static func conninfo(_ conninfo: String, applicationName: String) -> String {
        guard conninfo.contains("://") else { return conninfo + " application_name=\(applicationName)" }
        return conninfo + (conninfo.contains("?") ? "&" : "?") + "application_name=\(applicationName)"
    }

    static func isWaitingForALock(applicationName: String, conninfo: String) throws -> Bool {
        try Connection.withConnection(conninfo) { c in
            try c.query(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", [applicationName]
            ).scalar != "0"
        }
    }

    /// Polls `condition` every 20 ms, blocking, for up to `limit`.
    static func until(_ limit: Duration, _ condition: () throws -> Bool) -> Bool {
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            if (try? condition()) == true { return true }
            usleep(20_000)
        }
        return false
    }
}
