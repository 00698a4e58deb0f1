import FakeCloudKit
import Foundation
import LibPQ
import Synchronization
import TestSupport
import Testing
import ZoneFeedPostgres

/// `zonefeed psql` on a destination that needs a password: psql connects, and the password is
/// not on psql's command line, which every local user can read (`ps`), nor in its environment.
@Suite struct PsqlCommandTests {
    /// Every character that a URI, a quoted value or a password file line must escape.
    static let password = #"p@ss:w/rd 'q' "d" \b%20&x=1?#é"#

    /// A role that must give its password, on the test server.
    static func passwordRole(_ prefix: String) async throws -> PasswordRole {
        try await PasswordRole.create(TestDatabase.uniqueName(prefix), password: Self.password, on: try await TestDatabase.connectionString())
    }

    /// `zonefeed psql -At` started on a pipeline whose destination is `url`, reading its input
    /// from the pipe returned; remove the binary's folder and end the process when done.
    static func startPsql(_ prefix: String, url: String) async throws -> (ZonefeedBinary, ZonefeedBinary.Running, Pipe) {
        var p = try await FakePipeline(prefix: prefix, fake: FakeSettings(seed: 1, zones: 1, recordsPerZone: 1))
        p.url = url
        let zonefeed = try ZonefeedBinary(environment: p.environment)
        let file = try p.write(to: zonefeed.directory)
        let input = Pipe()
        return (zonefeed, try await zonefeed.start(["psql", file, "-At"], input: input), input)
    }

    @Test func psqlConnectsWithAPasswordThatIsNotOnItsCommandLine() async throws {
        let hba = try await Self.passwordRole("psql")
        defer { hba.drop() }
        let role = hba.role

        // A client key's passphrase too, which no environment variable carries: it goes in a
        // service file of this user's own (libpq reads it only with a client certificate).
        let keyPassphrase = "k3y:pass'phrase"
        for (form, url) in [("URI", hba.uri), ("key=value", hba.keyValue + " sslpassword='k3y:pass\\'phrase'")] {
            // psql reads its query from a pipe the test closes only once it has looked at the
            // running psql: however slow the machine, psql is there to be seen.
            let (zonefeed, running, input) = try await Self.startPsql("psqlpw", url: url)
            defer { zonefeed.remove() }
            defer { running.end(SIGKILL) }
            let psql = await Self.child(named: "psql", of: running.pid)
            input.fileHandleForWriting.write(Data("SELECT current_user;\n".utf8))
            try input.fileHandleForWriting.close()
            let output = await running.wait()

            #expect(output.status == 0, "\(form): \(output.stderr)")
            #expect(output.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == role, "\(form): psql connected as the role")
            let seen = try #require(psql, "\(form): psql was found running")
            #expect(seen.arguments.contains("-d"), "\(form): \(seen.arguments)")
            let arguments = seen.arguments.joined(separator: " ")
            for secret in [Self.password, "p@ss:w/rd", "p%40ss"] {
                #expect(!arguments.contains(secret), "\(form): psql's arguments hold no part of the password: \(arguments)")
            }
            #expect(!seen.environment.contains { $0.hasPrefix("PGPASSWORD=") }, "\(form): nor does PGPASSWORD")
            let passfile = seen.environment.first { $0.hasPrefix("PGPASSFILE=") }.map { String($0.dropFirst("PGPASSFILE=".count)) }
            let path = try #require(passfile, "\(form): psql was given a password file: \(seen.environment.filter { $0.hasPrefix("PG") })")
            #expect(seen.passfileMode == 0o600, "\(form): the password file is private")
            #expect(!FileManager.default.fileExists(atPath: path), "\(form): the password file is removed once psql ends")
            #expect(!arguments.contains(keyPassphrase) && !arguments.contains("k3y"), "\(form): nor the key's passphrase: \(arguments)")
            let serviceFile = seen.environment.first { $0.hasPrefix("PGSERVICEFILE=") }.map { String($0.dropFirst("PGSERVICEFILE=".count)) }
            if form == "key=value" {
                let file = try #require(serviceFile, "the passphrase went in a service file: \(seen.environment.filter { $0.hasPrefix("PG") })")
                #expect(!FileManager.default.fileExists(atPath: file), "the service file is removed once psql ends")
            } else {
                #expect(serviceFile == nil)
            }
        }
    }

    /// A password file left by a zonefeed killed while psql ran (SIGKILL, the OOM killer) is
    /// removed by the next `zonefeed psql` of the same user; one of a process still running is
    /// left alone.
    @Test func aPasswordFileLeftByAKilledZonefeedIsRemovedByTheNextPsql() async throws {
        let folder = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        let ended = Process()
        ended.executableURL = URL(fileURLWithPath: "/bin/true")
        try ended.run()
        ended.waitUntilExit()
        let left = "\(folder)/zonefeed-pgpass-\(ended.processIdentifier)-left\(UInt32.random(in: 0...UInt32.max))"
        let live = "\(folder)/zonefeed-pgpass-\(getpid())-live\(UInt32.random(in: 0...UInt32.max))"
        // Named by an older release, without a process's ID: removed once a day old.
        let olderRelease = "\(folder)/zonefeed-pgpass-old\(UInt32.random(in: 0...UInt32.max))"
        let olderToday = "\(folder)/zonefeed-pgpass-new\(UInt32.random(in: 0...UInt32.max))"
        for path in [left, live, olderRelease, olderToday] {
            #expect(FileManager.default.createFile(atPath: path, contents: Data("*:*:*:*:secret\n".utf8), attributes: [.posixPermissions: 0o600]))
        }
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-2 * 86_400)], ofItemAtPath: olderRelease)
        defer { for path in [left, live, olderRelease, olderToday] { try? FileManager.default.removeItem(atPath: path) } }
        let hba = try await Self.passwordRole("psqlleft")
        defer { hba.drop() }
        let (zonefeed, running, input) = try await Self.startPsql("psqlleft", url: hba.uri)
        defer { zonefeed.remove() }
        defer { running.end(SIGKILL) }
        input.fileHandleForWriting.write(Data("SELECT 1;\n".utf8))
        try input.fileHandleForWriting.close()
        let output = await running.wait()
        #expect(output.status == 0, "\(output.stderr)")
        #expect(!FileManager.default.fileExists(atPath: left), "the ended process's file is removed")
        #expect(FileManager.default.fileExists(atPath: live), "a running process's file is left")
        #expect(!FileManager.default.fileExists(atPath: olderRelease), "an older release's file two days old is removed")
        #expect(FileManager.default.fileExists(atPath: olderToday), "one of today is left")
    }

    /// A hang-up (the terminal closed) or a termination sent to zonefeed while psql runs is
    /// passed on to psql, and zonefeed removes the password file once psql has ended. zonefeed
    /// died under either, leaving the file (the password in plain text) behind and psql orphaned.
    @Test(arguments: [SIGHUP, SIGTERM])
    func aSignalToZonefeedEndsPsqlAndLeavesNoPasswordFile(_ number: Int32) async throws {
        let hba = try await Self.passwordRole("psqlsig")
        defer { hba.drop() }
        // psql waits on its input, which the test does not close.
        let (zonefeed, running, input) = try await Self.startPsql("psqlsig", url: hba.uri)
        defer { zonefeed.remove() }
        defer { running.end(SIGKILL) }
        let psql = try #require(await Self.child(named: "psql", of: running.pid), "psql was found running")
        let passfile = try #require(psql.environment.first { $0.hasPrefix("PGPASSFILE=") }.map { String($0.dropFirst("PGPASSFILE=".count)) })
        #expect(FileManager.default.fileExists(atPath: passfile))
        running.signal(number)
        let (output, timedOut) = await running.wait(within: .seconds(60))

        #expect(!timedOut, "zonefeed ended once psql had: \(output.stderr)")
        #expect(output.status != 0)
        #expect(!FileManager.default.fileExists(atPath: passfile), "the password file is removed")
        #expect(kill(psql.pid, 0) != 0, "psql has ended")
        try? input.fileHandleForWriting.close()
    }

    /// psql searches the pipeline's schema by its exact name, spaces and capitals kept: the
    /// name went into PGOPTIONS as it was, where the server splits options at spaces (psql did
    /// not connect) and folds an unquoted name to lower case (it searched another schema).
    @Test func psqlSearchesASchemaNamedWithSpacesAndCapitals() async throws {
        var p = try await FakePipeline(prefix: "psqlschema", fake: FakeSettings(seed: 1, zones: 1, recordsPerZone: 1))
        p.schema = "Team \\ Notes \(p.schema.uppercased())"
        _ = try await p.run()
        let zonefeed = try ZonefeedBinary(environment: p.environment)
        defer { zonefeed.remove() }
        let file = try p.write(to: zonefeed.directory)

        let output = try await zonefeed.run(["psql", file, "-At", "-c", "SELECT (current_schemas(false))[1], count(*) FROM zonefeed_runs"])
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "\(p.schema)|1", "\(output.stdout)")
    }

    /// What a test saw of a running process.
    struct SeenProcess {
        var pid: Int32
        var arguments: [String]
        var environment: [String]
        var passfileMode: Int?
    }

    /// The child of `parent` with that command name, as /proc shows it while it runs; nil when
    /// none appeared within 60 s or `parent` ended first.
    static func child(named name: String, of parent: Int32) async -> SeenProcess? {
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline, kill(parent, 0) == 0 {
            for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
                guard let pid = Int32(entry), let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                    let open = stat.firstIndex(of: "("), let close = stat.lastIndex(of: ")")
                else { continue }
                // `pid (comm) state ppid …`: the command name may hold spaces and parentheses.
                let comm = stat[stat.index(after: open)..<close]
                let rest = stat[stat.index(after: close)...].split(separator: " ")
                guard comm == name, rest.count > 1, Int32(rest[1]) == parent else { continue }
                let arguments = Self.nulSeparated("/proc/\(pid)/cmdline")
                let environment = Self.nulSeparated("/proc/\(pid)/environ")
                guard !arguments.isEmpty else { continue }  // not yet exec'd
                let passfile = environment.first { $0.hasPrefix("PGPASSFILE=") }.map { String($0.dropFirst("PGPASSFILE=".count)) }
                let mode = passfile.flatMap { try? FileManager.default.attributesOfItem(atPath: $0)[.posixPermissions] as? Int }
                return SeenProcess(pid: pid, arguments: arguments, environment: environment, passfileMode: mode)
            }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return nil
    }

    static func nulSeparated(_ path: String) -> [String] {
        guard let data = FileManager.default.contents(atPath: path) else { return [] }
        return data.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
    }
}

/// A role that must give its password (scram-sha-256) on the test server, and the connection
/// strings that name it, with the password, in both of libpq's forms.
struct PasswordRole {
    let base: String
    let role: String
    let uri: String
    let keyValue: String
    /// The server's pg_hba.conf, when this test added its rules to it.
    let hbaFile: String?

    /// Tests of this suite run at once, each adding its role's rules and taking them out: each
    /// change is made whole (read, changed, written, reloaded) under this lock, and touches its
    /// own lines only. Each wrote back the file as it had found it, and a server reloading a
    /// file another test was writing refused every connection ("no pg_hba.conf entry").
    static let hbaLock = Mutex(())

    /// The rules that let `role` in with its password only.
    static func rules(for role: String) -> [String] { ["local all \(role) scram-sha-256", "host all \(role) all scram-sha-256"] }

    /// The throwaway server trusts every local connection: a rule for this role alone comes
    /// first in its pg_hba.conf (the test's user owns the server or is root). A configured server
    /// (`ZONEFEED_TEST_DATABASE_URL`) elsewhere is left as it is, and must ask for passwords.
    static func create(_ role: String, password: String, on base: String) async throws -> PasswordRole {
        var hbaFile: String?
        try Connection.withConnection(base) { c in
            let create = try c.query("SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', $1::text, $2::text)", [role, password]).scalar ?? ""
            try c.execute(create)
            if let path = try c.query("SHOW hba_file").scalar {
                try hbaLock.withLock { _ in
                    guard let current = try? String(contentsOfFile: path, encoding: .utf8) else { return }
                    try (rules(for: role).joined(separator: "\n") + "\n" + current).write(toFile: path, atomically: false, encoding: .utf8)
                    try c.query("SELECT pg_reload_conf()")
                    hbaFile = path
                }
            }
        }
        var parameters = try #require(Connection.parameters(of: base)).filter { $0.keyword != "user" && $0.keyword != "password" }
        // Without a dbname libpq would ask for the role's own database, which does not exist.
        if !parameters.contains(where: { $0.keyword == "dbname" }) { parameters.append(("dbname", "postgres")) }
        let dbname = parameters.first { $0.keyword == "dbname" }?.value ?? "postgres"
        func quoted(_ s: String) -> String { "'" + s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'") + "'" }
        func encoded(_ s: String) -> String {
            s.addingPercentEncoding(withAllowedCharacters: CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~"))
                ?? s
        }
        let keyValue = (parameters + [("user", role), ("password", password)]).map { "\($0.0)=\(quoted($0.1))" }.joined(separator: " ")
        let query = parameters.filter { $0.keyword != "dbname" }.map { "\($0.keyword)=\(encoded($0.value))" }.joined(separator: "&")
        let uri = "postgresql://\(encoded(role)):\(encoded(password))@/\(encoded(dbname))" + (query.isEmpty ? "" : "?\(query)")
        let made = PasswordRole(base: base, role: role, uri: uri, keyValue: keyValue, hbaFile: hbaFile)

        // The rule holds once the server has read it again: without the password, no entry.
        let withoutPassword = (parameters + [("user", role)]).map { "\($0.0)=\(quoted($0.1))" }.joined(separator: " ")
        let deadline = ContinuousClock.now + .seconds(60)
        while (try? Connection(withoutPassword)) != nil, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        guard (try? Connection(withoutPassword)) == nil else {
            made.drop()
            throw PasswordRoleFailure(description: "the test server lets role \(role) in without its password, so the test would prove nothing")
        }
        let who = try Connection.withConnection(keyValue) { c in try c.query("SELECT current_user").scalar }
        #expect(who == role, "with its password, the role connects")
        return made
    }

    func drop() {
        _ = try? Connection.withConnection(base) { c in
            if let hbaFile {
                try Self.hbaLock.withLock { _ in
                    guard let current = try? String(contentsOfFile: hbaFile, encoding: .utf8) else { return }
                    let own = Set(Self.rules(for: role))
                    let kept = current.split(separator: "\n", omittingEmptySubsequences: false).filter { !own.contains(String($0)) }
                    try? kept.joined(separator: "\n").write(toFile: hbaFile, atomically: false, encoding: .utf8)
                    try c.query("SELECT pg_reload_conf()")
                }
            }
            try c.execute("DROP ROLE IF EXISTS \(quoteIdentifier(role))")
        }
    }
}

struct PasswordRoleFailure: Error, CustomStringConvertible {
    var description: String
}
