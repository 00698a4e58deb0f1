@testable import CloudKitWebServices
import Foundation
import Logging
import Testing

/// A backfill receives a new web auth token with every page; the file keeps up with the newest
/// without paying two fsyncs per page.
@Suite struct WebAuthTokenStoreTests {
    let logger = Logger(label: "test")

    @Test func tokensArrivingTogetherAreWrittenOnceAndTheNewestWinsAtFlush() async throws {
        let (store, file, folder) = try makeStore(configured: "configured", writeInterval: .seconds(3600))
        defer { try? FileManager.default.removeItem(atPath: folder) }

        store.received("rotated-1", logger: logger)
        try await waitUntil { (try? String(contentsOfFile: file, encoding: .utf8)) == "rotated-1\n" }
        for i in 2...40 { store.received("rotated-\(i)", logger: logger) }
        try await Task.sleep(for: .milliseconds(200))
        #expect(try String(contentsOfFile: file, encoding: .utf8) == "rotated-1\n", "the next write waits for its interval")
        #expect(store.fileWrites == 1)

        await store.flush(logger: logger)
        #expect(try String(contentsOfFile: file, encoding: .utf8) == "rotated-40\n")
        #expect(store.fileWrites == 2, "39 tokens that came within one interval cost one write")
        await store.flush(logger: logger)
        #expect(store.fileWrites == 2, "a flush with nothing new writes nothing")
    }

    @Test func aTokenThatCameDuringTheIntervalReachesTheFileWithoutAFlush() async throws {
        let (store, file, folder) = try makeStore(writeInterval: .milliseconds(50))
        defer { try? FileManager.default.removeItem(atPath: folder) }

        store.received("rotated-1", logger: logger)
        store.received("rotated-2", logger: logger)
        store.received("rotated-3", logger: logger)
        try await waitUntil { (try? String(contentsOfFile: file, encoding: .utf8)) == "rotated-3\n" }
        #expect(store.fileWrites <= 2)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: folder)
        #expect(leftovers == ["notes.web-auth-token"], "no temporary file is left behind")
    }

    @Test func aTokenThatArrivesAfterTheFlushIsWrittenAtOnce() async throws {
        let (store, file, folder) = try makeStore(writeInterval: .seconds(3600))
        defer { try? FileManager.default.removeItem(atPath: folder) }

        store.received("rotated-1", logger: logger)
        store.received("rotated-2", logger: logger)
        await store.flush(logger: logger)
        #expect(try String(contentsOfFile: file, encoding: .utf8) == "rotated-2\n")
        // A request that was under way when the client shut down answers with one more token.
        store.received("rotated-3", logger: logger)
        try await waitUntil { (try? String(contentsOfFile: file, encoding: .utf8)) == "rotated-3\n" }
    }

    /// A store for `notes.web-auth-token` in a new folder.
    func makeStore(configured: String? = nil, writeInterval: Duration) throws -> (store: WebAuthTokenStore, file: String, folder: String) {
        let folder = try temporaryFolder()
        let file = folder + "/notes.web-auth-token"
        return (WebAuthTokenStore(configured: configured, file: file, writeInterval: writeInterval, logger: logger), file, folder)
    }

    /// Polls `condition` for up to ten seconds.
    func waitUntil(_ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while !condition() {
            guard ContinuousClock.now < deadline else {
                Issue.record("the condition did not hold within 10 s")
                return
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }
}
