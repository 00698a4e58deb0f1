import Foundation
import LibPQ
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

@Suite struct ConnectionTests {
    @Test func parametersTravelAsValuesNeverAsSQL() async throws {
        let c = try Connection(try await TestDatabase.connectionString())
        let hostile = "'); DROP TABLE x; --"
        #expect(try c.query("SELECT $1::text", [hostile]).scalar == hostile)
        #expect(try c.query("SELECT $1::text IS NULL", [nil]).scalar == "t")
    }

    /// A name from a server or a file is one identifier whatever it holds: its quotes are doubled
    /// where PostgreSQL sees them, also where a combining mark after the quote, or a prepended one
    /// before it, makes the quote part of a larger Character; such a name once ended its quotes
    /// early and ran the rest as SQL (a new field's column, under schema evolution).
    @Test(arguments: [
        "a\"\u{301}; DROP TABLE victim; --",
        "\u{600}\" int); DROP TABLE victim; --",
        "x\"\u{FE0F}\"\u{200D}",
        "plain \"quoted\" name",
    ])
    func anIdentifierFromOutsideIsOneNameWhateverItHolds(name: String) async throws {
        let c = try Connection(try await TestDatabase.connectionString())
        try c.execute("CREATE TEMP TABLE victim (id int)")
        try c.execute("CREATE TEMP TABLE hostile (\(quoteIdentifier(name)) int)")
        let column = try c.query(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'hostile'::regclass AND attnum > 0 AND NOT attisdropped"
        ).rows.map { $0[0] }
        #expect(column.map { $0.map { Array($0.utf8) } } == [Array(name.utf8)], "\(column)")
        #expect(try c.query("SELECT to_regclass('victim') IS NOT NULL").scalar == "t", "nothing after the name ran")
    }

    /// A connection over a Unix-domain socket (the tests' server, a local PostgreSQL) asks for
    /// a send buffer of 4 MiB, as a TCP socket's grows to by itself: with the default, a COPY's
    /// server waited for rows whenever the client was not scheduled within about 4 ms. What the
    /// kernel grants depends on the machine (net.core.wmem_max), so the connection's buffer is
    /// held against what a socket that asks for as much is granted, and a socket's default.
    @Test func aConnectionOverAUnixSocketAsksForAWideSendBuffer() async throws {
        let c = try Connection(try await TestDatabase.connectionString())
        #expect(try c.query("SELECT inet_client_addr() IS NULL").scalar == "t", "the tests' server is reached over a Unix socket")
        var pair: [Int32] = [-1, -1]
        #if canImport(Glibc)
            let stream = Int32(SOCK_STREAM.rawValue)
        #else
            let stream = SOCK_STREAM
        #endif
        #expect(socketpair(AF_UNIX, stream, 0, &pair) == 0)
        defer { for fd in pair where fd >= 0 { close(fd) } }
        var asked = Connection.unixSocketSendBufferBytes
        #expect(setsockopt(pair[1], SOL_SOCKET, SO_SNDBUF, &asked, socklen_t(MemoryLayout<Int32>.size)) == 0)
        let (standard, granted) = (Self.sendBuffer(pair[0]), Self.sendBuffer(pair[1]))
        #expect(granted != standard, "a socket that asks gets another buffer than the default")
        #expect(c.sendBufferBytes == granted)
    }

    /// Over a Unix socket the kernel names the process that listens: the server's postmaster,
    /// the parent of the session's backend (what `zonefeed bench` reads the server's CPU from).
    @Test func aConnectionOverAUnixSocketNamesTheServerProcess() async throws {
        let c = try Connection(try await TestDatabase.connectionString())
        let backend = try #require(try c.query("SELECT pg_backend_pid()").scalar.flatMap { Int32($0) })
        let stat = try String(contentsOfFile: "/proc/\(backend)/stat", encoding: .utf8)
        // The fields after the command's closing parenthesis: state, then the parent's pid.
        let parent = stat[stat.index(after: try #require(stat.lastIndex(of: ")")))...].split(separator: " ").dropFirst().first
        #expect(c.peerProcessID != nil && c.peerProcessID != backend)
        #expect(c.peerProcessID.map { "\($0)" } == parent.map(String.init), "the postmaster is the backend's parent")
    }

    static func sendBuffer(_ fd: Int32) -> Int {
        var size: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        #expect(getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, &length) == 0)
        return Int(size)
    }

    @Test func errorsCarryTheirSQLState() async throws {
        let c = try Connection(try await TestDatabase.connectionString())
        do {
            try c.execute("SELECT * FROM no_such_table_here")
            Issue.record("the query should have failed")
        } catch let error as PostgresError {
            #expect(error.sqlState == "42P01")
            #expect(error.description.contains("no_such_table_here"))
        }
    }

    /// A value the server quotes in its message (class 22, data exceptions) or in its DETAIL
    /// line (a unique key) is not in what the error prints, which logs and zonefeed_runs keep;
    /// the SQLSTATE, the table and the constraint are.
    @Test func anErrorPrintsNoValueTheServerQuoted() async throws {
        let c = try Connection(try await TestDatabase.connectionString())
        let secret = "zf-row-value-\(TestDatabase.uniqueName("v"))"
        let cast = try #require(throws: PostgresError.self) { try c.query("SELECT $1::bigint", [secret]) }
        #expect(cast.sqlState == "22P02")
        #expect(cast.message.contains(secret), "the server's own message stays for code: \(cast.message)")
        #expect(!cast.description.contains(secret), "\(cast)")
        #expect(
            cast.description
                == "PostgreSQL error 22P02: a value is not valid input for its column's type (the server's message is not shown, as it may quote a row's value)"
        )

        let table = TestDatabase.uniqueName("unique")
        try c.execute("CREATE TEMP TABLE \(table) (id text PRIMARY KEY)")
        try c.query("INSERT INTO \(table) VALUES ($1)", [secret])
        let duplicate = try #require(throws: PostgresError.self) { try c.query("INSERT INTO \(table) VALUES ($1)", [secret]) }
        #expect(duplicate.detail?.contains(secret) == true, "the DETAIL line quotes the key")
        #expect(duplicate.description == "PostgreSQL error 23505 in table \(table): duplicate key value violates unique constraint \"\(table)_pkey\"")
    }

    /// libpq's own reading of a connection string: a URI's percent-encoding and a quoted value's
    /// escapes undone, nothing added that the string does not set.
    @Test(arguments: [
        "postgresql://app:p%40ss%3Aw%20rd%27@db.example:5433/notes?sslmode=require",
        #"host=db.example port=5433 user=app password='p@ss:w rd\'' dbname=notes sslmode=require"#,
    ])
    func libpqSaysWhatAConnectionStringSets(conninfo: String) {
        let parameters = Connection.parameters(of: conninfo)?.map { "\($0.keyword)=\($0.value)" }
        #expect(parameters == ["user=app", "password=p@ss:w rd'", "dbname=notes", "host=db.example", "port=5433", "sslmode=require"])
        #expect(Connection.parameters(of: "host=db password='unclosed") == nil)
    }

    /// libpq waits for ever unless told: a connection has its waits bounded, unless its string,
    /// `PGCONNECT_TIMEOUT` or a service says otherwise.
    @Test func aConnectionsWaitsAreBoundedUnlessItsStringSaysOtherwise() async throws {
        let url = try await TestDatabase.connectionString()
        let c = try Connection(url)
        #expect(Connection.waitBounds(for: "host=db", environment: [:]).map(\.keyword) == Connection.defaultWaitBounds.map(\.keyword))
        #expect(Connection.defaultWaitBounds.first { $0.keyword == "connect_timeout" }?.value == "30")
        // What this machine's string and environment leave unset (all of them, unless the
        // tests were given a database whose string or PG* variables set their own).
        let bounds = Connection.waitBounds(for: url, environment: ProcessInfo.processInfo.environment)
        for (keyword, value) in bounds { #expect(c.settings[keyword] == value, "\(keyword)") }
        #expect(c.settings["password"] == nil)

        let own = url.contains("://") ? url + (url.contains("?") ? "&" : "?") + "connect_timeout=7" : url + " connect_timeout=7"
        #expect(try Connection(own).settings["connect_timeout"] == "7", "the string's own wins")
        #expect(Connection.waitBounds(for: "host=db keepalives_idle=5", environment: [:]).map(\.keyword).contains("keepalives_idle") == false)
        #expect(Connection.waitBounds(for: "host=db", environment: ["PGCONNECT_TIMEOUT": "4"]).map(\.keyword).contains("connect_timeout") == false)
        #expect(Connection.waitBounds(for: "host=db", environment: ["PGSERVICE": "prod"]).isEmpty, "a service file sets its own")
        #expect(Connection.waitBounds(for: "service=prod", environment: [:]).isEmpty)
    }

    /// A server that accepts the connection and never answers (a proxy before a server that is
    /// gone) is given up after the bound, not waited on for ever.
    @Test func aServerThatNeverAnswersIsGivenUpAfterTheConnectTimeout() async throws {
        let silent = try await SilentServer()
        defer { silent.stop() }
        let began = ContinuousClock.now
        do {
            _ = try await offPool { try Connection("host=127.0.0.1 port=\(silent.port) user=x dbname=x sslmode=disable") }
            Issue.record("a silent server gave a connection")
        } catch {
            let took = ContinuousClock.now - began
            print("a silent server was given up after \(took): \(error)")
            #expect("\(error)".contains("timeout expired"), "\(error)")
            #expect(took >= .seconds(25) && took < .seconds(120), "\(took)")
        }
    }

    @Test func aFailedConnectionNeverPrintsThePassword() async throws {
        let secret = "hunter2-very-secret"
        do {
            _ = try Connection("host=/nonexistent-dir user=x password=\(secret) connect_timeout=1")
            Issue.record("the connection should have failed")
        } catch {
            #expect(!"\(error)".contains(secret))
            #expect("\(error)".contains("could not connect"))
        }
    }

    /// A URI whose password holds an unencoded '@': libpq ends the password at the first and
    /// takes the rest for the host, which its error names; that part is cut out too.
    @Test func aPasswordCutShortByAnAtSignIsNotPrintedAsTheHost() {
        do {
            _ = try Connection("postgresql://app:Tr0ub@dor-tail@db.invalid/app?connect_timeout=1")
            Issue.record("the connection should have failed")
        } catch {
            #expect(!"\(error)".contains("dor-tail"), "\(error)")
            #expect(!"\(error)".contains("Tr0ub"), "\(error)")
        }
    }

    @Test func binaryCopyWritesEveryTypeExactly() async throws {
        do {
            let c = try Connection(try await TestDatabase.connectionString())
            let table = TestDatabase.uniqueName("copy")
            try c.execute(
                "CREATE TEMP TABLE \(table) (t text, b bigint, d double precision, ts timestamptz, j jsonb, a bigint[], e text[], n text, "
                    + "y bytea, z text, w bytea, ta text[], ea bigint[], f bytea)")
            var buffer = BinaryCopyBuffer()
            buffer.beginTuple(fieldCount: 14)
            buffer.append(text: "zoë \"quoted\" \\ tab\t")
            buffer.append(bigint: Int64.min)
            buffer.append(double: -0.5)
            buffer.append(timestampMicroseconds: 0)
            buffer.append(jsonb: Array(#"{"k": [1, 2]}"#.utf8))
            buffer.appendArray(elementOID: BinaryCopyBuffer.OID.int8, count: 2) {
                $0.append(bigint: Int64.max)
                $0.append(bigint: 1)
            }
            buffer.appendInt32(12)
            buffer.appendInt32(0)
            buffer.appendInt32(0)
            buffer.appendInt32(BinaryCopyBuffer.OID.text)
            buffer.appendNull()
            buffer.append(bytea: [0, 255, 7])
            buffer.append(text: "")
            buffer.append(bytea: [])
            // Elements counted as they are written; an empty array; bytes a closure writes.
            let start = buffer.beginArrayField(elementOID: BinaryCopyBuffer.OID.text)
            buffer.append(text: "a")
            buffer.append(text: "bé")
            buffer.endArrayField(at: start, count: 2)
            buffer.appendEmptyArrayField(elementOID: BinaryCopyBuffer.OID.int8)
            #expect(!buffer.appendField(atMost: 8) { _ in nil })
            #expect(
                buffer.appendField(atMost: 8) { room in
                    room[0] = 0xAB
                    room[1] = 0xCD
                    return 2
                })
            buffer.finish()
            let bytes = buffer.bytes
            let rows = try c.copyIn("COPY \(table) FROM STDIN (FORMAT binary)") { try $0.write(bytes) }
            #expect(rows == 1)
            let r = try c.query(
                "SELECT t, b::text, d::text, ts AT TIME ZONE 'UTC', j::text, a::text, e::text, n, encode(y, 'hex'), z, encode(w, 'hex'), "
                    + "ta::text, ea::text, encode(f, 'hex') FROM \(table)"
            ).rows[0]
            #expect(
                Array(r) == [
                    "zoë \"quoted\" \\ tab\t", "-9223372036854775808", "-0.5", "2000-01-01 00:00:00", #"{"k": [1, 2]}"#,
                    "{9223372036854775807,1}", "{}", nil, "00ff07", "", "", "{a,bé}", "{}", "abcd",
                ])
        }
    }
}

@Suite struct ConnectionStringSecrecyTests {
    @Test func aConnectionStringLibpqCannotParseIsNotEchoed() {
        let secret = "s3cr%ZZet-password"
        do {
            _ = try Connection("postgresql://user:\(secret)@localhost/db")
            Issue.record("the connection should have failed")
        } catch {
            #expect(!"\(error)".contains("s3cr"))
        }
    }

    @Test func rowsDecodeIntoSwiftTypesAndABadValueNamesItsColumn() async throws {
        let c = try Connection(try await TestDatabase.connectionString())
        let row = try c.query("SELECT 42::bigint AS answer, 'x' AS word, true AS yes, NULL::text AS nothing, 0.5::float8 AS half").rows[0]
        #expect(try row.decode(0, as: Int64.self) == 42)
        #expect(try row.decode(1, as: String.self) == "x")
        #expect(try row.decode(2, as: Bool.self))
        #expect(try row.decode(3, as: String?.self) == nil)
        #expect(try row.decode(4, as: Double.self) == 0.5)
        #expect(try c.query("SELECT count(*) FROM generate_series(1, 3)").scalar(as: Int.self) == 3)
        let error = #expect(throws: PostgresError.self) { try row.decode(1, as: Int64.self) }
        #expect(error?.kind == .decoding)
        #expect(error?.description == "unexpected value from PostgreSQL: column word is not a bigint")
        #expect(throws: PostgresError.self) { try row.decode(3, as: String.self) }
    }
}
