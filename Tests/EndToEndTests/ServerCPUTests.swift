import Foundation
import LibPQ
import TestSupport
import Testing

@testable import ZoneFeedBench

/// `zonefeed bench` reads the server's CPU from /proc, beside each phase's rows: a session's
/// time must count once, whether its backend is still there or has ended, and no process's
/// name may shift the fields it is read from.
@Suite struct ServerCPUTests {
    /// The work of a session that has ended by the second sample is counted: the postmaster
    /// adds a reaped backend's time to its children's.
    @Test func aSessionsWorkIsCountedAfterItEnds() async throws {
        let conninfo = try await TestDatabase.connectionString()
        let server = try #require(ServerCPU.find(conninfo: conninfo), "the tests' server runs on this machine, over a Unix socket")
        let before = server.sample()
        let (backend, spent) = try Connection.withConnection(conninfo) { c in
            // Several hundred milliseconds of the backend's CPU, and nothing of this process's.
            _ = try c.query("SELECT sum(i * i % 7) FROM generate_series(1::bigint, 4000000) AS i")
            let backend = try #require(try c.query("SELECT pg_backend_pid()").scalar.flatMap { Int32($0) })
            let stat = try String(contentsOfFile: "/proc/\(backend)/stat", encoding: .utf8)
            return (backend, try #require(ServerCPU.times(ofStatLine: stat)).own)
        }
        // Once the postmaster has reaped the backend, its time is only in the postmaster's
        // children's. The condition is polled, with a deadline: no event tells another process
        // that a process it did not start was reaped (a pidfd becomes readable at the exit,
        // before the reaping this test needs).
        let reaped = ContinuousClock.now + .seconds(30)
        while FileManager.default.fileExists(atPath: "/proc/\(backend)") && ContinuousClock.now < reaped {
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(!FileManager.default.fileExists(atPath: "/proc/\(backend)"), "the session's backend ended")
        let use = try #require(server.use(since: before))
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        #expect(spent > 10, "the query kept the backend busy: \(spent) ticks")
        #expect(use.serverSeconds >= Double(spent) / ticks, "\(use) against the backend's \(spent) ticks")
        #expect((0...1).contains(use.idleShare))
        #expect(use.text(rows: 1000).hasPrefix("PostgreSQL "), "\(use.text(rows: 1000))")
    }

    /// A command's name is the process's to choose (PostgreSQL sets its sessions' titles, and any
    /// process can name itself `a) S 1 2 3`): the fields are counted from its last parenthesis.
    @Test func aProcesssNameCannotShiftTheFields() {
        let fields = "S 4242 5 5 0 -1 4194560 100 0 0 0 70 30 900 100 20 0 1 0 555 1000 10"
        for name in ["postgres", "post gres", "a) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14", "((x))", ")"] {
            let times = ServerCPU.times(ofStatLine: "123 (\(name)) \(fields)")
            #expect(times?.state == "S" && times?.parent == 4242, "\(name): \(String(describing: times))")
            #expect(times?.own == 100 && times?.reapedChildren == 1000 && times?.startedAt == 555, "\(name): \(String(describing: times))")
        }
        let tail = "20 0 1 0 555 1000 10"
        for broken in [
            "", "123 postgres S 4242", "123 (postgres) S 4242 5 5", "123 (postgres) S x 5 5 0 -1 4194560 100 0 0 0 70 30 900 100 \(tail)",
            "123 (postgres) S 4242 5 5 0 -1 4194560 100 0 0 0 -70 30 900 100 \(tail)",
            "123 (postgres) S 4242 5 5 0 -1 4194560 100 0 0 0 \(Int.max) 1 0 0 \(tail)",
            "123 (postgres) S 4242 5 5 0 -1 4194560 100 0 0 0 70 30 \(Int.max) 1 \(tail)",
            "123 (postgres) SS 4242 5 5 0 -1 4194560 100 0 0 0 70 30 900 100 \(tail)",
        ] {
            #expect(ServerCPU.times(ofStatLine: broken) == nil, "\(broken)")
        }
    }

    @Test func theMachinesIdleTimeIsIdleAndIOWait() {
        let ticks = ServerCPU.machineTicks(ofStatLine: "cpu  100 5 50 800 20 1 4 0 30 0")
        #expect(ticks?.all == 980 && ticks?.idle == 820, "guest time is in user time already: \(String(describing: ticks))")
        #expect(ServerCPU.machineTicks(ofStatLine: "cpu0 100 5 50 800 20 1 4 0") == nil, "one core's line is not the machine's")
        #expect(ServerCPU.machineTicks(ofStatLine: "cpu 100 5 50") == nil)
        #expect(ServerCPU.machineTicks(ofStatLine: "cpu 100 5 50 800 20 1 4 x") == nil)
    }
}
