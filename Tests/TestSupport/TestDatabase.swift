import Foundation
import ZoneFeedPostgres

/// The PostgreSQL the integration tests run against: `ZONEFEED_TEST_DATABASE_URL` when it is set,
/// otherwise a throwaway cluster that this test process starts on first use and removes at exit.
/// No test skips because a database is missing.
public enum TestDatabase {
    /// A libpq connection string for the test database. Each test should work in a schema of its
    /// own (`uniqueName("merge")`), since tests of one process share the cluster.
    public static func connectionString() throws -> String {
        if let configured = ProcessInfo.processInfo.environment["ZONEFEED_TEST_DATABASE_URL"], !configured.isEmpty {
            return configured
        }
        return try throwawayCluster.get()
    }

    /// A lowercase identifier for a per-test schema or pipeline: `t_<prefix>_<8 hex digits>`.
    /// The prefix is cut so the whole stays within PostgreSQL's 63-byte identifiers.
    public static func uniqueName(_ prefix: String) -> String {
        let cleaned = String(prefix.lowercased().map { $0.isASCII && ($0.isLetter || $0.isNumber) ? $0 : "_" }.prefix(40))
        return "t_\(cleaned)_\(randomHex(bytes: 4))"
    }

    // Swift runs a static's initializer once, on first use, under a lock (swift_once): two tests
    // asking at the same time get the same cluster. A failure is kept too: retrying would not help.
    private static let throwawayCluster: Result<String, any Error> = Result { try startThrowawayCluster() }

    private static func startThrowawayCluster() throws -> String {
        // Under /tmp itself, not $TMPDIR: the Unix socket path must stay under 100 bytes (macOS's
        // $TMPDIR alone is about 50), and a root run's server account must be able to reach it.
        let directory = "/tmp/zonefeed-test-pg-\(getpid())-\(randomHex(bytes: 3))"
        let embedded = EmbeddedPostgres(
            EmbeddedPostgres.Configuration(
                directory: directory,
                extraServerSettings: [
                    // Durability buys nothing for a cluster deleted at exit.
                    "fsync": "off",
                    "synchronous_commit": "off",
                    "full_page_writes": "off",
                    // Tests run in parallel and each may hold a few connections.
                    "max_connections": "200",
                ]
            )
        )
        let handle: EmbeddedPostgres.Handle
        do {
            handle = try embedded.start()
        } catch {
            try? FileManager.default.removeItem(atPath: directory)
            throw TestDatabaseError(underlying: "\(error)")
        }
        registration.set(Cluster(embedded: embedded, handle: handle, directory: directory))
        atexit { TestDatabase.removeThrowawayCluster() }
        // A test process that crashes or is killed never runs atexit handlers: a watcher process
        // then stops the server and deletes the folder.
        try? embedded.deleteWhenThisProcessEnds(handle)
        return handle.connectionString
    }

    /// At a normal exit: stop the server at once (its data is about to be deleted) and delete it.
    private static func removeThrowawayCluster() {
        guard let cluster = registration.take() else { return }
        cluster.embedded.stop(cluster.handle, mode: .immediate)
        try? FileManager.default.removeItem(atPath: cluster.directory)
    }

    private static func randomHex(bytes: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<bytes).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    }

    private struct Cluster: Sendable {
        var embedded: EmbeddedPostgres
        var handle: EmbeddedPostgres.Handle
        var directory: String
    }

    private static let registration = Registration()

    /// The cluster to remove at exit, behind a lock (atexit handlers cannot capture context).
    private final class Registration: @unchecked Sendable {
        private let lock = NSLock()
        private var cluster: Cluster?

        func set(_ cluster: Cluster) {
            lock.lock()
            defer { lock.unlock() }
            self.cluster = cluster
        }

        func take() -> Cluster? {
            lock.lock()
            defer { lock.unlock() }
            defer { cluster = nil }
            return cluster
        }
    }
}

/// The throwaway cluster could not be started.
public struct TestDatabaseError: Error, CustomStringConvertible {
    public let underlying: String

    public var description: String {
        "could not start a throwaway PostgreSQL for the tests (or set ZONEFEED_TEST_DATABASE_URL to a libpq "
            + "connection string of a server to use instead): \(underlying)"
    }
}
