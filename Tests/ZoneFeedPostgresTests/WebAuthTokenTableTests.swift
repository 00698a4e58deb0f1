import Dispatch
import Synchronization
import TestSupport
import Testing
import ZoneFeedPostgres

/// The table of web auth tokens that the replicas of a Deployment share
/// (`auth.webAuthTokenStore: database`).
@Suite struct WebAuthTokenTableTests {
    /// Two processes rewriting the row at once (each on its own connection) each keep what the
    /// other saved: a save of one never drops a token the other saved in between.
    @Test func updatesFromTwoConnectionsAtOnceLoseNothing() async throws {
        let conninfo = try await TestDatabase.connectionString()
        let schema = TestDatabase.uniqueName("tokens")
        let tables = (0..<2).map { _ in WebAuthTokenTable(pipelineName: "shared", schema: schema, conninfo: conninfo) }
        defer { for table in tables { table.close() } }
        let updates = 100
        let inside = Atomic(0)
        let mostInside = Atomic(0)
        let failures = Mutex<[String]>([])
        // Blocking libpq calls, each replica on a thread of its own, off the cooperative pool.
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let group = DispatchGroup()
            for (replica, table) in tables.enumerated() {
                DispatchQueue.global().async(group: group) {
                    for n in 0..<updates {
                        let now = inside.add(1, ordering: .sequentiallyConsistent).newValue
                        mostInside.max(now, ordering: .sequentiallyConsistent)
                        do {
                            try table.update { saved in (saved ?? "") + "replica\(replica)-\(n)\n" }
                        } catch {
                            failures.withLock { $0.append("\(error)") }
                        }
                        inside.subtract(1, ordering: .sequentiallyConsistent)
                    }
                }
            }
            group.notify(queue: .global()) { done.resume() }
        }
        #expect(failures.withLock { $0 } == [])
        #expect(mostInside.load(ordering: .sequentiallyConsistent) == 2, "the two replicas' saves overlapped")
        let lines = try #require(try tables[0].load()).split(separator: "\n")
        #expect(lines.count == 2 * updates && Set(lines).count == 2 * updates, "every line either replica added is kept")
    }
}
