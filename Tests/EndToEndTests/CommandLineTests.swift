import AsyncHTTPClient
import FakeCloudKit
import Foundation
import LibPQ
import TestSupport
import Testing
import ZoneFeed

@testable import ZoneFeedCommandLine

@Suite struct CommandLineTests {
    @Test func twoProcessesOnOnePipelineApplyEachZoneOnce() async throws {
        var p = try await FakePipeline(prefix: "twoproc", fake: FakeSettings(seed: 37, zones: 4, recordsPerZone: 3_000))
        p.commitEvery = 500
        // One connection each: a backend holding zone locks is then a process.
        p.parallelZones = 1
        let zonefeed = try ZonefeedBinary(environment: p.environment)
        defer { zonefeed.remove() }
        let file = try p.write(to: zonefeed.directory)

        // The runs overlap for certain: the record tables are locked against writes until two
        // sessions hold zone locks, so each run, once it has claimed a zone, waits to apply its
        // first batch with the claim held.
        try await p.prepare()
        let gate = try Connection(p.url)
        defer { gate.close() }
        try gate.execute("BEGIN")
        let tables = p.tables.values.sorted().map { "\(quoteIdentifier(p.schema)).\(quoteIdentifier($0))" }
        try gate.execute("LOCK TABLE \(tables.joined(separator: ", ")) IN SHARE MODE")
        let a = try await zonefeed.start(["run", file, "--progress", "never"])
        let b = try await zonefeed.start(["run", file, "--progress", "never"])
        let (mostHolders, _) = await p.mostZoneHolders(while: [a, b], until: 2, within: .seconds(120))
        try gate.execute("COMMIT")
        let (_, timedOut) = await p.mostZoneHolders(while: [a, b])
        if timedOut {
            a.end(SIGKILL)
            b.end(SIGKILL)
            Issue.record("the two runs did not end within 300 s")
        }
        let (outA, outB) = await (a.wait(), b.wait())
        #expect(mostHolders >= 2, "at one moment both processes held zones")
        #expect(outA.status == 0, "\(outA.stderr)")
        #expect(outB.status == 0, "\(outB.stderr)")

        let expected = p.expected()
        let snapshot = try await DestinationSnapshot.read(p)
        #expect(snapshot.differences(from: expected) == [])
        #expect(snapshot.runPages == expected.pages)
        #expect(snapshot.tombstonesByReason["deleted"] == expected.tombstones)
    }

    @Test func sigintEndsTheRunCleanlyAsInterruptedAndTheNextRunResumes() async throws {
        let (p, zonefeed, file, output) = try await interruptedRun(SIGINT, seed: 41)
        defer { zonefeed.remove() }
        #expect(output.status == 130, "\(output.stderr)")
        #expect(try await DestinationSnapshot.read(p).runStatuses == ["interrupted"])

        let resumed = try await zonefeed.run(["run", file, "--progress", "never"])
        #expect(resumed.status == 0)
        let expected = p.expected()
        let snapshot = try await DestinationSnapshot.read(p)
        #expect(snapshot.differences(from: expected) == [])
        // Resumed from what the interrupted run committed: the two read the feed once between
        // them, and the second only what the first had not committed.
        #expect(snapshot.runPages == expected.pages, "nothing applied twice, nothing passed over")
        let pages = try Connection.withConnection(p.url) { c in
            try c.query("SELECT pages FROM \(quoteIdentifier(p.schema)).zonefeed_runs ORDER BY run_id").rows.map { try $0.decode(0, as: Int.self) }
        }
        #expect(pages.count == 2 && pages[0] > 0 && pages[1] < expected.pages, "the interrupted run's pages were kept: \(pages)")
    }

    @Test func sigtermExitsWith143AndRecordsTheRunAsInterrupted() async throws {
        let (p, zonefeed, _, output) = try await interruptedRun(SIGTERM, seed: 43)
        defer { zonefeed.remove() }
        #expect(output.status == 143, "\(output.stderr)")
        #expect(try await DestinationSnapshot.read(p).runStatuses == ["interrupted"])
    }

    /// Runs the pipeline against a database that accepts the connection and never answers
    /// (`connectionOptions` added to its URI); returns once the run is connecting, with the
    /// process and what to stop when done.
    func runConnectingToASilentDatabase(
        _ prefix: String, seed: UInt64, connectionOptions: String = ""
    ) async throws -> (running: ZonefeedBinary.Running, cleanUp: () -> Void) {
        let silent = try await SilentServer()
        var p = try await FakePipeline(prefix: prefix, fake: FakeSettings(seed: seed, zones: 1, recordsPerZone: 10))
        p.url = "postgresql://zonefeed@127.0.0.1:\(silent.port)/zonefeed?sslmode=disable\(connectionOptions)"
        let zonefeed = try ZonefeedBinary(environment: p.environment)
        let file = try p.write(to: zonefeed.directory)
        let running = try await zonefeed.start(["run", file, "--progress", "never"])
        let deadline = ContinuousClock.now + .seconds(90)
        while silent.connections == 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(silent.connections >= 1, "the run was connecting to the database")
        return (
            running,
            {
                running.end(SIGKILL)
                silent.stop()
                zonefeed.remove()
            }
        )
    }

    /// A database that accepts the connection and never answers (a proxy before a server that
    /// is gone) held a run for ever, and a SIGTERM's graceful stop waited on it for ever too: the
    /// connection is given up after its bound (30 s) and the run ends, with a sentence that says
    /// so.
    @Test func aDatabaseThatNeverAnswersEndsTheRunAfterTheConnectBoundEvenWhenStopped() async throws {
        let (running, cleanUp) = try await runConnectingToASilentDatabase("silentdb", seed: 47)
        defer { cleanUp() }
        running.signal(SIGTERM)
        let (output, timedOut) = await running.wait(within: .seconds(90))
        #expect(!timedOut, "the run ended")
        #expect(output.status == 1, "\(output.status) \(output.stderr)")
        #expect(output.stderr.contains("timeout expired"), "\(output.stderr)")
    }

    /// The first SIGTERM asks the run to stop between batches, which waits on the database; a
    /// second ends the process at once, by its own hand (status 143, not ended by the signal),
    /// with the open transaction left to the server to roll back.
    @Test func aSecondSignalEndsTheProcessAtOnce() async throws {
        // Ten minutes to connect: on a loaded machine the test's own steps may lag by seconds.
        let (running, cleanUp) = try await runConnectingToASilentDatabase("twosignals", seed: 51, connectionOptions: "&connect_timeout=600")
        defer { cleanUp() }
        running.signal(SIGTERM)
        let deadline = ContinuousClock.now + .seconds(60)
        while !running.stderrSoFar.contains("a second signal stops at once"), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(running.stderrSoFar.contains("stopping: the open transaction commits or rolls back first"), "\(running.stderrSoFar)")
        #expect(running.isRunning, "the first signal waits for the run to stop")
        let sent = ContinuousClock.now
        running.signal(SIGTERM)
        let (output, timedOut) = await running.wait(within: .seconds(120))
        #expect(!timedOut)
        #expect(output.status == 143, "\(output.status) \(output.stderr)")
        #expect(ContinuousClock.now - sent < .seconds(120), "at once, not after the connection's ten minutes")
    }

    /// The summary's hint is a command to paste: its SQL is one shell word whatever a table is
    /// named. A table named to end the quotes (`t';touch pwned;'`) ran the rest when pasted.
    @Test func theSummarysHintRunsAsOneQueryWhateverTheTableIsNamed() async throws {
        var p = try await FakePipeline(prefix: "hintquote", fake: FakeSettings(seed: 49, zones: 1, recordsPerZone: 40))
        p.mappedTypes = ["Tag"]
        p.recordTypesSection = "recordTypes:\n  Tag:\n    table: \"t';touch pwned;'\"\n"
        p.tables = ["Tag": "t';touch pwned;'"]
        let zonefeed = try ZonefeedBinary(environment: p.environment)
        defer { zonefeed.remove() }
        let file = try p.write(to: zonefeed.directory)
        let run = try await zonefeed.run(["run", file, "--progress", "never"])
        #expect(run.status == 0, "\(run.stderr)")
        let hint = try #require(run.stdout.split(separator: "\n").first { $0.hasPrefix("Query it:") }, "\(run.stdout)")
        let queried = try await zonefeed.shell(String(hint.dropFirst("Query it:".count)).trimmingCharacters(in: .whitespaces))
        #expect(queried.status == 0, "\(hint)\n\(queried.stderr)")
        #expect(queried.stdout.contains("count"), "the hint ran its query: \(queried.stdout)")
        #expect(!FileManager.default.fileExists(atPath: zonefeed.directory.appendingPathComponent("pwned").path), "and nothing else")
    }

    /// The summary's hint names zonefeed as it was started: `swift run zonefeed` only for the
    /// debug build `swift run` starts from the package's folder. A release build started there
    /// printed it too, and the hint then built and ran a debug one.
    @Test func theHintNamesTheBuildThatRanNotAnother() throws {
        let package = FileManager.default.temporaryDirectory.appendingPathComponent("hint-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: package, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: package) }
        try "// swift-tools-version:6.0\n".write(to: package.appendingPathComponent("Package.swift"), atomically: true, encoding: .utf8)
        let here = package.path
        #expect(Invocation.command(argv0: ".build/x86_64-unknown-linux-gnu/debug/zonefeed", currentDirectory: here) == "swift run zonefeed")
        #expect(Invocation.command(argv0: ".build/debug/zonefeed", currentDirectory: here) == "swift run zonefeed")
        #expect(Invocation.command(argv0: ".build/release/zonefeed", currentDirectory: here) == ".build/release/zonefeed")
        #expect(Invocation.command(argv0: ".build/debug/zonefeed", currentDirectory: "/") == ".build/debug/zonefeed", "no package here")
        #expect(Invocation.command(argv0: "zonefeed", currentDirectory: here) == "zonefeed")
        #expect(Invocation.command(argv0: "/opt/my tools/zonefeed", currentDirectory: "/") == "'/opt/my tools/zonefeed'")
    }

    /// Starts a long backfill and sends `signal` once it has committed something.
    func interruptedRun(_ signal: Int32, seed: UInt64) async throws -> (FakePipeline, ZonefeedBinary, String, ZonefeedBinary.Output) {
        var p = try await FakePipeline(prefix: "signal", fake: FakeSettings(seed: seed, zones: 2, recordsPerZone: 40_000))
        p.commitEvery = 400
        let zonefeed = try ZonefeedBinary(environment: p.environment)
        let file = try p.write(to: zonefeed.directory)
        let running = try await zonefeed.start(["run", file, "--progress", "never"])
        _ = await p.waitForProgress(while: running)
        running.signal(signal)
        return await (p, zonefeed, file, running.wait())
    }

    /// A stopped fake server stops, even with an answer held for ten minutes (`faults/hold`):
    /// the graceful shutdown ends the hold rather than waiting for it.
    @Test func aHeldAnswerDoesNotKeepAStoppedFakeServerRunning() async throws {
        let zonefeed = try ZonefeedBinary()
        defer { zonefeed.remove() }
        let server = try await FakeServerProcess(zonefeed, seed: 1, zones: 1, recordsPerZone: 10, options: [])
        defer { server.stop() }
        try await server.admin("faults/hold", ["milliseconds": 600_000])
        let held = Task {
            var request = HTTPClientRequest(
                url: "\(server.url)/database/1/iCloud.com.example.fake/development/private/records/changes"
                    + "?ckAPIToken=fake-api-token&ckWebAuthToken=fake-web-auth-token")
            request.method = .POST
            request.body = .bytes(Array(#"{"zoneID":{"zoneName":"Zone01"}}"#.utf8))
            return try? await HTTPClient.shared.execute(request, timeout: .seconds(900)).status.code
        }
        defer { held.cancel() }
        var inFlight = 0
        let deadline = ContinuousClock.now + .seconds(60)
        while inFlight == 0, ContinuousClock.now < deadline {
            inFlight = try await server.traffic()["inFlight", default: 0]
            if inFlight == 0 { try await Task.sleep(for: .milliseconds(20)) }
        }
        try #require(inFlight == 1, "the request is held at the server")
        let (status, timedOut) = await server.stop(within: .seconds(60))
        #expect(!timedOut, "the server ended within a minute of SIGTERM, not after the ten-minute hold")
        #expect(status == 0)
    }

    /// `--host 0.0.0.0` (for docker compose) listens on every address; loopback stays the default.
    /// 127.0.0.2 is an address of the loopback interface other than 127.0.0.1: a server bound to
    /// 127.0.0.1 refuses it, one bound to every address answers it. (Looking for the socket in
    /// /proc/net/tcp missed it for two seconds once in CI, while the suite's other sockets came
    /// and went: the kernel lists them in pieces.)
    @Test func theFakeServerListensBeyondLoopbackWhenAsked() async throws {
        let zonefeed = try ZonefeedBinary()
        defer { zonefeed.remove() }
        func port(_ server: FakeServerProcess) throws -> Int {
            try #require(server.url.split(separator: ":").last.flatMap { Int($0) })
        }
        let everywhere = try await FakeServerProcess(zonefeed, seed: 1, zones: 1, recordsPerZone: 10, options: ["--host", "0.0.0.0"])
        defer { everywhere.stop() }
        #expect(everywhere.url.hasPrefix("http://0.0.0.0:"), "\(everywhere.url)")
        // Every IPv4 address of the machine's interfaces that are up, and 127.0.0.2.
        let addresses = Self.interfaceAddresses() + ["127.0.0.2"]
        for address in addresses {
            let answer = try await HTTPClient.shared.execute(
                HTTPClientRequest(url: "http://\(address):\(try port(everywhere))/admin/state"), timeout: .seconds(10))
            // An answer at all shows the server listens there; its admin endpoints answer
            // loopback clients only, and refuse the others.
            #expect(answer.status.code == (address.hasPrefix("127.") ? 200 : 403), "\(address)")
        }

        let loopback = try await FakeServerProcess(zonefeed, seed: 1, zones: 1, recordsPerZone: 10)
        defer { loopback.stop() }
        #expect(loopback.url.hasPrefix("http://127.0.0.1:"), "\(loopback.url)")
        let loopbackPort = try port(loopback)
        let local = try await HTTPClient.shared.execute(HTTPClientRequest(url: "http://127.0.0.1:\(loopbackPort)/admin/state"), timeout: .seconds(10))
        #expect(local.status.code == 200)
        await #expect(throws: (any Error).self, "a server on loopback alone refuses 127.0.0.2") {
            _ = try await HTTPClient.shared.execute(HTTPClientRequest(url: "http://127.0.0.2:\(loopbackPort)/admin/state"), timeout: .seconds(10))
        }
    }

    /// The IPv4 addresses of the interfaces that are up (127.0.0.1 among them).
    static func interfaceAddresses() -> [String] {
        var first: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&first) == 0 else { return [] }
        defer { freeifaddrs(first) }
        var addresses: [String] = []
        var next = first
        while let entry = next {
            defer { next = entry.pointee.ifa_next }
            guard let address = entry.pointee.ifa_addr, address.pointee.sa_family == sa_family_t(AF_INET),
                entry.pointee.ifa_flags & UInt32(IFF_UP) != 0
            else { continue }
            var text = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
            var inet = UnsafeRawPointer(address).load(as: sockaddr_in.self).sin_addr
            if inet_ntop(AF_INET, &inet, &text, socklen_t(text.count)) != nil {
                addresses.append(String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
            }
        }
        return addresses
    }

    @Test func versionNamesZonefeedItsCommitLibpqAndSwift() async throws {
        let zonefeed = try ZonefeedBinary()
        defer { zonefeed.remove() }
        let output = try await zonefeed.run(["--version"])
        #expect(output.status == 0, "\(output.stderr)")
        let lines = output.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 4, "\(output.stdout)")
        #expect(lines.first?.hasPrefix("zonefeed ") == true)
        // A plain `swift build` does not know its commit and says so; docker/stamp-commit tells it.
        #expect(lines.contains { $0.hasPrefix("commit ") }, "\(output.stdout)")
        #expect(lines.contains { $0.hasPrefix("libpq 1") }, "libpq's major version, 10 or later")
        #expect(lines.contains { $0.hasPrefix("Swift 6") })
    }

    @Test func aBadPipelineFileExitsWith2AndNamesTheLine() async throws {
        let zonefeed = try ZonefeedBinary()
        defer { zonefeed.remove() }
        let file = zonefeed.directory.appendingPathComponent("bad.yml").path
        try "pipeline: bad\nsource:\n  fake: {}\ndestination:\n  url: embedded\nrecordTypes:\n  Note:\n    fields:\n      wordCount: bigin\n"
            .write(toFile: file, atomically: true, encoding: .utf8)
        for command in ["run", "validate", "status"] {
            let output = try await zonefeed.run([command, file])
            #expect(output.status == 2)
            #expect(output.stderr.contains("bad.yml:9:18: unknown type 'bigin' for field wordCount (did you mean 'bigint'?)"), "\(output.stderr)")
        }
    }

    @Test func statusShowsCheckpointsAndRunsAndResetMarksZonesForResync() async throws {
        let p = try await FakePipeline(prefix: "status", fake: FakeSettings(seed: 47, zones: 2, recordsPerZone: 500))
        let zonefeed = try ZonefeedBinary(environment: p.environment)
        defer { zonefeed.remove() }
        let file = try p.write(to: zonefeed.directory)
        #expect(try await zonefeed.run(["run", file]).status == 0)

        let status = try await zonefeed.run(["status", file])
        #expect(status.status == 0)
        #expect(status.stdout.contains("Zone01") && status.stdout.contains("Zone02") && status.stdout.contains("succeeded"))

        #expect(try await zonefeed.run(["reset", file]).status == 2, "reset needs --zone or --all")
        let reset = try await zonefeed.run(["reset", file, "--zone", "Zone02"])
        #expect(reset.status == 0)
        #expect(reset.stdout.contains("Zone02"))
        #expect(try await zonefeed.run(["status", file]).stdout.contains("resyncing"))
    }
}
