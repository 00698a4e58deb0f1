import EmbeddedPostgresServer
import Foundation

/// The PostgreSQL the integration tests run against: `ZONEFEED_TEST_DATABASE_URL` when it is set,
/// otherwise a throwaway cluster that this test process starts on first use and removes at exit.
/// No test skips because a database is missing.
public enum TestDatabase {
    /// A libpq connection string for the test database. Each test should work in a schema of its
    /// own (`uniqueName("merge")`), since tests of one process share the cluster.
    public static func connectionString() async throws -> String {
        if let configured = ProcessInfo.processInfo.environment["ZONEFEED_TEST_DATABASE_URL"], !configured.isEmpty {
            return configured
        }
        return try await throwawayCluster.value
    }

    /// A lowercase identifier for a per-test schema or pipeline: `t_<prefix>_<8 hex digits>`.
    /// The prefix is cut so the whole stays within PostgreSQL's 63-byte identifiers.
    public static func uniqueName(_ prefix: String) -> String {
        let cleaned = String(prefix.lowercased().map { $0.isASCII && ($0.isLetter || $0.isNumber) ? $0 : "_" }.prefix(40))
        return "t_\(cleaned)_\(randomHex(bytes: 4))"
    }

    // Swift runs a static's initializer once, on first use, under a lock (swift_once): two tests
    // asking at the same time await the same start. A failure is kept too: retrying would not help.
    private static let throwawayCluster = Task { try await startThrowawayCluster() }

    private static func startThrowawayCluster() async throws -> String {
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
                    // Tests run in parallel and each may hold a few connections (a run's sessions,
                    // its spares, the test's own): a fresh-clone CI run met "too many clients" at 200.
                    "max_connections": "400",
                ]
            )
        )
        let handle: EmbeddedPostgres.Handle
        do {
            handle = try await embedded.start()
        } catch {
            try? FileManager.default.removeItem(atPath: directory)
            throw TestDatabaseError(underlying: "\(error)")
        }
        // The cluster outlives every test of the process. When the process ends, however it ends
        // (atexit handlers do not run after a crash or SIGKILL, and could not await a stop), a
        // watcher process stops the server at once and deletes the folder.
        do {
            try await embedded.deleteWhenThisProcessEnds(handle)
        } catch {
            await embedded.stop(handle, mode: .immediate)
            try? FileManager.default.removeItem(atPath: directory)
            throw TestDatabaseError(underlying: "\(error)")
        }
        return handle.connectionString
    }

    private static func randomHex(bytes: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<bytes).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
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
