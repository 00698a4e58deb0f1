import Foundation
import Logging
import Testing

@testable import CloudKitWebServices

/// A token reaches the file as it arrives, and every request carries the newest token once the
/// file has it; fsyncs are batched, since only a power loss can take back what reached the page
/// cache.
@Suite struct WebAuthTokenStoreTests {
    let logger = Logger(label: "test")

    @Test func theFileHasATokenBeforeTheRequestThatCarriesItIsSent() async throws {
        try await withStore(configured: "configured", syncInterval: .seconds(3600)) { store, file in
            #expect(await store.tokenForRequest(logger: logger) == "configured")
            #expect(try lines(file).first == "configured")
            for i in 1...40 {
                store.received("rotated-\(i)", logger: logger)
                #expect(await store.tokenForRequest(logger: logger) == "rotated-\(i)")
                #expect(try lines(file).first == "rotated-\(i)")
            }
            #expect(store.fileWrites == 41, "one write per token, shared by its arrival and the request that carries it")
            #expect(store.fileSyncs == 0, "no fsync waits for its interval")
            await store.flush(logger: logger)
            #expect(store.fileSyncs == 1)
            let mode = try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? Int
            #expect(mode == 0o600)
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: (file as NSString).deletingLastPathComponent)
            #expect(leftovers == ["notes.web-auth-token"], "no temporary file is left behind")
        }
    }

    @Test func aTokenHandedToARequestIsInTheFileWhileOthersArrive() async throws {
        try await withStore(syncInterval: .seconds(3600)) { store, file in
            let logger = self.logger
            let missing = try await withThrowingTaskGroup(of: [String].self) { group in
                group.addTask {
                    for i in 1...300 {
                        store.received("rotated-\(i)", logger: logger)
                        await Task.yield()
                    }
                    return []
                }
                group.addTask {
                    var missing: [String] = []
                    for _ in 0..<300 {
                        guard let token = await store.tokenForRequest(logger: logger) else { continue }
                        // The file has this token or a newer one (tokens arrive numbered in order).
                        let newest = try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n").first.map(String.init) ?? ""
                        func number(_ token: String) -> Int { Int(token.dropFirst("rotated-".count)) ?? -1 }
                        if number(newest) < number(token) { missing.append(token) }
                    }
                    return missing
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            #expect(missing == [], "every token a request carried was in the file, or a newer one, when it was handed out")
        }
    }

    @Test func writesAreSyncedInTheBackgroundAtMostOncePerInterval() async throws {
        try await withStore(syncInterval: .milliseconds(500)) { store, _ in
            let started = ContinuousClock.now
            for i in 1...20 {
                store.received("rotated-\(i)", logger: logger)
                _ = await store.tokenForRequest(logger: logger)
            }
            let intervals = Int((ContinuousClock.now - started) / .milliseconds(500))
            try await waitUntil { store.fileSyncs >= 1 }
            #expect(store.fileWrites == 20)
            #expect(store.fileSyncs <= intervals + 1, "at most one sync per interval: \(store.fileSyncs) in \(intervals + 1) intervals")
        }
    }

    @Test func aRequestWithNothingNewWritesNothing() async throws {
        try await withStore(syncInterval: .seconds(3600)) { store, _ in
            store.received("rotated-1", logger: logger)
            _ = await store.tokenForRequest(logger: logger)
            _ = await store.tokenForRequest(logger: logger)
            store.received("rotated-1", logger: logger)
            _ = await store.tokenForRequest(logger: logger)
            #expect(store.fileWrites == 1)
        }
    }

    @Test func aRefusedTokenGivesWayToTheOnesReceivedBeforeIt() async throws {
        try await withStore(configured: "configured", syncInterval: .seconds(3600)) { (store, file) async throws in
            store.received("rotated-1", logger: logger)
            store.received("rotated-2", logger: logger)
            _ = await store.tokenForRequest(logger: logger)
            #expect(try lines(file).prefix(3) == ["rotated-2", "earlier=rotated-1", "earlier=configured"])

            #expect(store.refused("rotated-2"))
            #expect(await store.tokenForRequest(logger: logger) == "rotated-1")
            #expect(try lines(file).first == "rotated-1", "a refused token is not kept")
            #expect(store.refused("rotated-1"))
            #expect(!store.refused("configured"), "no token is left: a person must sign in")
            #expect(store.current == nil)
        }
    }

    @Test func theNextRunStartsWithTheSavedTokensAndWhatItLearned() async throws {
        try await withStore(configured: "configured", syncInterval: .seconds(3600)) { (store, file) async throws in
            store.received("rotated-1", logger: logger)
            store.learnOneAtATime()
            await store.flush(logger: logger)
            #expect(try lines(file).contains("requests=one-at-a-time"))

            let next = WebAuthTokenStore(configured: "configured", file: file, logger: logger)
            #expect(next.current == "rotated-1")
            #expect(next.oneAtATime)
        }
    }

    @Test func aTokenConfiguredAfterASignInWinsOverTheSavedOnes() async throws {
        try await withStore(configured: "first-sign-in", syncInterval: .seconds(3600)) { store, file in
            store.received("rotated-1", logger: logger)
            store.learnOneAtATime()
            await store.flush(logger: logger)

            let next = WebAuthTokenStore(configured: "second-sign-in", file: file, logger: logger)
            #expect(next.current == "second-sign-in")
            #expect(next.oneAtATime, "what was learned of the server stays")
            #expect(await next.tokenForRequest(logger: logger) == "second-sign-in")
            #expect(WebAuthTokenStore(configured: "second-sign-in", file: file, logger: logger).current == "second-sign-in")
        }
    }

    @Test func aOneLineFileFromAnEarlierVersionIsATokenAlone() throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let file = folder + "/old.web-auth-token"
        try "saved-token\n".write(toFile: file, atomically: true, encoding: .utf8)
        let store = WebAuthTokenStore(configured: "configured", file: file, logger: logger)
        #expect(store.current == "saved-token")
        #expect(!store.oneAtATime)
    }

    @Test func aTokenIsWrittenAsItArrivesWithoutWaitingForARequest() async throws {
        try await withStore(syncInterval: .seconds(3600)) { store, file in
            store.received("rotated-1", logger: logger)
            try await waitUntil { (try? lines(file).first) == "rotated-1" }
            // A request that was under way when the client shut down answers with one more token.
            await store.flush(logger: logger)
            store.received("rotated-2", logger: logger)
            try await waitUntil { (try? lines(file).first) == "rotated-2" }
        }
    }

    /// Runs `body` with a store for `notes.web-auth-token` in a new folder, and removes the
    /// folder once the store's writes are done. A token's arrival queues a write that a test
    /// need not wait for; when the folder was removed before it landed, the write made it
    /// again, and the temporary folder kept a `zonefeed-ck-…/notes.web-auth-token`.
    func withStore(
        configured: String? = nil, syncInterval: Duration, _ body: (WebAuthTokenStore, String) async throws -> Void
    ) async throws {
        let folder = try temporaryFolder()
        let file = folder + "/notes.web-auth-token"
        let store = WebAuthTokenStore(configured: configured, file: file, syncInterval: syncInterval, logger: logger)
        do {
            try await body(store, file)
        } catch {
            await store.flush(logger: logger)
            try? FileManager.default.removeItem(atPath: folder)
            throw error
        }
        // The writer queue is serial: the flush's write comes after every write queued before it.
        await store.flush(logger: logger)
        try? FileManager.default.removeItem(atPath: folder)
    }

    func lines(_ file: String) throws -> [String] {
        try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n").map(String.init)
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
