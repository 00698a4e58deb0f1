import Foundation
import Logging
import Synchronization
import Testing

@testable import CloudKitWebServices

/// A token reaches the file as it arrives, and every request carries the newest token once the
/// file has it; fsyncs are batched, since only a power loss can take back what reached the page
/// cache.
@Suite struct WebAuthTokenStoreTests {
    let logger = Logger(label: "test")

    @Test func aTokenFromAHeaderIsTakenWithoutTheWhitespaceAroundIt() async throws {
        // The shortcut for a token that starts and ends printable must trim as Foundation does.
        for raw in ["AbC+/=09", " token", "token\r\n", "\u{00A0}token\u{2003}", "\ttoken with space\n", "", "  ", "é", "token é", "~"] {
            #expect(WebAuthTokenStore.trimmed(raw) == raw.trimmingCharacters(in: .whitespacesAndNewlines), "\(raw.debugDescription)")
        }
        try await withStore(configured: "configured", syncInterval: .seconds(3600)) { store, file in
            store.received("  rotated\r\n", logger: logger)
            let token = try await store.tokenForRequest(logger: logger)
            #expect(token == "rotated")
            #expect(try lines(file).first == "rotated")
        }
    }

    @Test func theFileHasATokenBeforeTheRequestThatCarriesItIsSent() async throws {
        try await withStore(configured: "configured", syncInterval: .seconds(3600)) { store, file in
            #expect(try await store.tokenForRequest(logger: logger) == "configured")
            #expect(try lines(file).first == "configured")
            for i in 1...40 {
                store.received("rotated-\(i)", logger: logger)
                #expect(try await store.tokenForRequest(logger: logger) == "rotated-\(i)")
                #expect(try lines(file).first == "rotated-\(i)")
            }
            #expect(store.fileWrites == 41, "one write per token, shared by its arrival and the request that carries it")
            #expect(store.fileSyncs == 0, "no fsync waits for its interval")
            try await store.flush(logger: logger)
            #expect(store.fileSyncs == 1)
            let mode = try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? Int
            #expect(mode == 0o600)
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: (file as NSString).deletingLastPathComponent)
            #expect(leftovers == ["notes.web-auth-token"], "no temporary file is left behind")
        }
    }

    /// A pipeline's `.zonefeed/` folder is not there before its first run: the first save makes
    /// it, for its owner alone, and later saves find it.
    @Test func theFirstSaveMakesTheFoldersTheFileGoesIn() async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let file = folder + "/.zonefeed/tokens/notes.web-auth-token"
        let store = WebAuthTokenStore(configured: "configured", file: file, logger: logger)
        #expect(try await store.tokenForRequest(logger: logger) == "configured")
        store.received("rotated", logger: logger)
        #expect(try await store.tokenForRequest(logger: logger) == "rotated")
        try await store.flush(logger: logger)
        #expect(try lines(file).first == "rotated")
        #expect(store.fileWrites == 2)
        for (path, mode) in [(folder + "/.zonefeed/tokens", 0o700), (file, 0o600)] {
            #expect(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int == mode, "\(path)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder + "/.zonefeed/tokens") == ["notes.web-auth-token"])
    }

    /// Tokens arrive while requests are handed theirs: each request's token (or a newer one) is
    /// in the file when the request gets it, and the test counts the requests during which a
    /// token arrived, so that it proves the overlap it is about. The tokens arrive from a thread
    /// of their own, and the requests go on until one overlapped (and 300 tokens came): taken in
    /// turns on the tasks' two threads, a loaded machine once ran every arrival between two
    /// requests, and one overlap in 100,000 tokens is what the full suite's load once left.
    @Test func aTokenHandedToARequestIsInTheFileWhileOthersArrive() async throws {
        try await withStore(syncInterval: .seconds(3600)) { store, file in
            let logger = self.logger
            let arrived = Counter()
            let stopping = Counter()
            // Finished by the arrivals' thread as it ends.
            let (ended, end) = AsyncStream.makeStream(of: Void.self)
            Thread.detachNewThread {
                var i = 0
                while stopping.value == 0 {
                    i += 1
                    store.received("rotated-\(i)", logger: logger)
                    arrived.add()
                }
                end.finish()
            }
            var missing: [String] = []
            var overlapped = 0
            let deadline = ContinuousClock.now + .seconds(120)
            while overlapped < 1 || arrived.value < 300, ContinuousClock.now < deadline {
                let before = arrived.value
                let token = try await store.tokenForRequest(logger: logger)
                if arrived.value != before { overlapped += 1 }
                guard let token else { continue }
                // The file has this token or a newer one (tokens arrive numbered in order).
                let newest = try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n").first.map(String.init) ?? ""
                func number(_ token: String) -> Int { Int(token.dropFirst("rotated-".count)) ?? -1 }
                if number(newest) < number(token) { missing.append(token) }
            }
            stopping.add()
            for await _ in ended {}
            #expect(overlapped >= 1, "tokens arrived while a request was handed its token")
            #expect(missing == [], "every token a request carried was in the file, or a newer one, when it was handed out")
        }
    }

    /// A count that concurrent tasks share.
    final class Counter: Sendable {
        private let count = Mutex(0)
        var value: Int { count.withLock { $0 } }
        func add() { count.withLock { $0 += 1 } }
    }

    @Test func writesAreSyncedInTheBackgroundAtMostOncePerInterval() async throws {
        try await withStore(syncInterval: .milliseconds(500)) { store, _ in
            let started = ContinuousClock.now
            for i in 1...20 {
                store.received("rotated-\(i)", logger: logger)
                _ = try await store.tokenForRequest(logger: logger)
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
            _ = try await store.tokenForRequest(logger: logger)
            _ = try await store.tokenForRequest(logger: logger)
            store.received("rotated-1", logger: logger)
            _ = try await store.tokenForRequest(logger: logger)
            #expect(store.fileWrites == 1)
        }
    }

    @Test func aRefusedTokenGivesWayToTheOnesReceivedBeforeIt() async throws {
        try await withStore(configured: "configured", syncInterval: .seconds(3600)) { (store, file) async throws in
            store.received("rotated-1", logger: logger)
            store.received("rotated-2", logger: logger)
            _ = try await store.tokenForRequest(logger: logger)
            #expect(try lines(file).prefix(3) == ["rotated-2", "earlier=rotated-1", "earlier=configured"])

            #expect(await store.refused("rotated-2", logger: logger))
            #expect(try await store.tokenForRequest(logger: logger) == "rotated-1")
            // The server takes rotated-1 and rotates it on: the refused token leaves the file.
            store.received("rotated-3", logger: logger)
            try await store.flush(logger: logger)
            #expect(try lines(file).prefix(3) == ["rotated-3", "earlier=rotated-1", "earlier=configured"], "a refused token is not kept")
            #expect(await store.refused("rotated-3", logger: logger))
            #expect(await store.refused("rotated-1", logger: logger))
            #expect(await !store.refused("configured", logger: logger), "no token is left: a person must sign in")
            #expect(store.current == nil)
        }
    }

    /// CloudKit answers `AUTHENTICATION_FAILED` to a wrong API token whatever web auth token
    /// comes with it, so every token is refused in turn: the vault keeps them all, and once the
    /// API token is put right the next run starts from the newest, with nobody signing in again.
    @Test func tokensAllRefusedLeaveTheVaultAsItWas() async throws {
        try await withStore(configured: "configured", syncInterval: .seconds(3600)) { (store, file) async throws in
            store.received("rotated-1", logger: logger)
            store.received("rotated-2", logger: logger)
            try await store.flush(logger: logger)
            let before = try String(contentsOfFile: file, encoding: .utf8)
            var tried: [String] = []
            while let token = try await store.tokenForRequest(logger: logger) {
                tried.append(token)
                #expect(try String(contentsOfFile: file, encoding: .utf8) == before, "nothing written before refusal \(tried.count)")
                guard await store.refused(token, logger: logger) else { break }
            }
            #expect(tried == ["rotated-2", "rotated-1", "configured"])
            try await store.flush(logger: logger)
            #expect(try String(contentsOfFile: file, encoding: .utf8) == before)
            let next = WebAuthTokenStore(configured: "configured", file: file, logger: logger)
            #expect(try await next.tokenForRequest(logger: logger) == "rotated-2")
        }
    }

    /// A save while tokens are being refused, before the server has taken one (a refusal with
    /// requests in flight makes the client go one request at a time, which is saved), keeps
    /// the refused tokens in the vault: the refusals may all be a wrong API token's.
    /// A refusal writes nothing, but the token tried next goes out only once the vault has it:
    /// here another process's save has left it out.
    @Test func theTokenTriedAfterARefusalIsInTheVaultBeforeItGoesOut() async throws {
        try await withStore(configured: "configured", syncInterval: .seconds(3600)) { (store, file) async throws in
            store.received("a1", logger: logger)
            store.received("a2", logger: logger)
            try await store.flush(logger: logger)
            // Another process sharing the vault saved its own token and kept only a2 of these.
            try "b1\nearlier=a2\n".write(toFile: file, atomically: true, encoding: .utf8)
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: file)
            #expect(await store.refused("a2", logger: logger))
            #expect(try await store.tokenForRequest(logger: logger) == "b1", "the other process's token, from the vault")
            #expect(await store.refused("b1", logger: logger))
            #expect(try await store.tokenForRequest(logger: logger) == "a1")
            let tokens = try lines(file).filter { !$0.contains("-at=") && !$0.hasPrefix("requests=") && !$0.hasPrefix("configured-token") }
            #expect(tokens.contains("a1") || tokens.contains("earlier=a1"), "a1 saved before it goes out: \(tokens)")
        }
    }

    @Test func aSaveBeforeATokenIsTakenKeepsTheRefusedOnes() async throws {
        try await withStore(configured: "configured", syncInterval: .seconds(3600)) { (store, file) async throws in
            store.received("rotated-1", logger: logger)
            store.received("rotated-2", logger: logger)
            try await store.flush(logger: logger)
            let next = WebAuthTokenStore(configured: "configured", file: file, logger: logger)
            #expect(await next.refused("rotated-2", logger: logger))
            next.learnOneAtATime()
            #expect(try await next.tokenForRequest(logger: logger) == "rotated-1")
            var tokens = try lines(file).filter { !$0.contains("-at=") && !$0.hasPrefix("requests=") && !$0.hasPrefix("configured-token") }
            #expect(tokens == ["rotated-1", "earlier=rotated-2", "earlier=configured"], "written, with the refused token kept")
            #expect(try lines(file).contains("requests=one-at-a-time"))

            // Once the server takes a token, the next save leaves the refused one out.
            next.used()
            next.received("rotated-3", logger: logger)
            try await next.flush(logger: logger)
            tokens = try lines(file).filter { !$0.contains("-at=") && !$0.hasPrefix("requests=") && !$0.hasPrefix("configured-token") }
            #expect(tokens == ["rotated-3", "earlier=rotated-1", "earlier=configured"])
        }
    }

    @Test func theNextRunStartsWithTheSavedTokensAndWhatItLearned() async throws {
        try await withStore(configured: "configured", syncInterval: .seconds(3600)) { (store, file) async throws in
            store.received("rotated-1", logger: logger)
            store.learnOneAtATime()
            try await store.flush(logger: logger)
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
            try await store.flush(logger: logger)

            let next = WebAuthTokenStore(configured: "second-sign-in", file: file, logger: logger)
            #expect(next.current == "second-sign-in")
            #expect(next.oneAtATime, "what was learned of the server stays")
            #expect(try await next.tokenForRequest(logger: logger) == "second-sign-in")
            #expect(WebAuthTokenStore(configured: "second-sign-in", file: file, logger: logger).current == "second-sign-in")
        }
    }

    @Test func whoSignedInAndWhenTheTokenRotatedAndWasUsedAreKeptWithTheTokens() async throws {
        try await withStore(configured: "configured", syncInterval: .seconds(3600)) { store, file in
            let before = Date().addingTimeInterval(-1)
            store.received("rotated-1", logger: logger)
            store.signedIn(as: "_alice")
            try await store.flush(logger: logger)
            let saved = try lines(file)
            #expect(saved.contains("user=_alice"))
            #expect(saved.contains { $0.hasPrefix("rotated-at=") } && saved.contains { $0.hasPrefix("used-at=") })

            let next = WebAuthTokenStore(configured: "configured", file: file, logger: logger)
            #expect(next.userRecordName == "_alice")
            #expect(next.rotatedAt.map { $0 >= before.addingTimeInterval(-1) } == true)
            // A person who configures a new token has signed in elsewhere: who and when are unknown.
            let configured = WebAuthTokenStore(configured: "new-sign-in", file: file, logger: logger)
            #expect(configured.userRecordName == nil && configured.rotatedAt == nil)
        }
    }

    @Test func aSignInSavedAheadOfAStaleConfiguredTokenWinsAtTheNextStart() throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let file = WebAuthTokenFile(path: folder + "/notes.web-auth-token")
        var contents = WebAuthTokenFile.Contents(tokens: ["signed-in"], configuredFingerprint: WebAuthTokenFile.fingerprint(of: "stale"))
        contents.userRecordName = "_alice"
        contents.signedInAt = Date(timeIntervalSince1970: 1_800_000_000)
        try file.write(contents)
        let store = WebAuthTokenStore(configured: "stale", file: file.path, logger: logger)
        #expect(store.current == "signed-in")
        #expect(store.signedInAt == Date(timeIntervalSince1970: 1_800_000_000))
    }

    @Test func aUserNameOrATimeThatIsNotOneIsNotTaken() {
        let contents = WebAuthTokenFile.contents(of: "token\nuser=_a\u{1b}[2J\nsigned-in-at=soon\nrotated-at=99999999999999999999\nused-at=-5\n")
        #expect(contents?.tokens == ["token"])
        #expect(contents?.userRecordName == nil && contents?.signedInAt == nil && contents?.rotatedAt == nil && contents?.usedAt == nil)
    }

    @Test func aOneLineFileFromAnEarlierVersionIsATokenAlone() throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let file = folder + "/old.web-auth-token"
        try "saved-token\n".write(toFile: file, atomically: true, encoding: .utf8)
        #expect(chmod(file, 0o600) == 0)
        let store = WebAuthTokenStore(configured: "configured", file: file, logger: logger)
        #expect(store.current == "saved-token")
        #expect(!store.oneAtATime)
    }

    @Test func aTokenIsWrittenAsItArrivesWithoutWaitingForARequest() async throws {
        try await withStore(syncInterval: .seconds(3600)) { store, file in
            store.received("rotated-1", logger: logger)
            try await waitUntil { (try? lines(file).first) == "rotated-1" }
            // A request that was under way when the client shut down answers with one more token.
            try await store.flush(logger: logger)
            store.received("rotated-2", logger: logger)
            try await waitUntil { (try? lines(file).first) == "rotated-2" }
        }
    }

    // MARK: A file holding secrets is opened safely

    /// What a store makes of a token file that is not the user's own plain file: every way is
    /// refused with a sentence, and no request is sent (not with the configured token either,
    /// which the server may have moved past).
    @Test(arguments: ["symbolic link", "readable by others", "a gigabyte", "a FIFO", "one long line"])
    func aTokenFileThatIsNotTheUsersOwnPlainFileIsRefused(kind: String) async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let file = folder + "/notes.web-auth-token"
        let expected: String
        switch kind {
        case "symbolic link":
            // The system's password file: its first line must never reach a server as a token.
            #expect(symlink("/etc/passwd", file) == 0)
            expected = "is a symbolic link"
        case "readable by others":
            try "saved-token\n".write(toFile: file, atomically: true, encoding: .utf8)
            #expect(chmod(file, 0o644) == 0)
            expected = "group or others may access it (mode 644)"
        case "a gigabyte":
            makeSparseFile(file, bytes: 1 << 30)
            expected = "larger than \(WebAuthTokenFile.maxBytes) bytes"
        case "a FIFO":
            #expect(mkfifo(file, 0o600) == 0)
            expected = "not a regular file"
        default:
            try (String(repeating: "x", count: 50_000) + "\n").write(toFile: file, atomically: true, encoding: .utf8)
            #expect(chmod(file, 0o600) == 0)
            expected = "a line of 50000 bytes"
        }
        let store = WebAuthTokenStore(configured: "configured", file: file, logger: logger)
        let error = await #expect(throws: WebAuthTokenFileFailure.self) { _ = try await store.tokenForRequest(logger: logger) }
        #expect(error?.description.contains(expected) == true, "\(error.map(\.description) ?? "")")
        #expect(error?.description.contains(file) == true)
        #expect(error?.description.contains("root:") != true, "nothing of the file is quoted")
        // The run's end flushes the store: that returns too (it opened a FIFO to sync it and
        // waited for a writer for ever).
        let flushed = Mutex(false)
        // A task of its own, not a child: a group would wait for ever for a flush that hangs.
        Task {
            try? await store.flush(logger: logger)
            flushed.withLock { $0 = true }
        }
        try await waitUntil { flushed.withLock { $0 } }
    }

    @Test func aTokenFileOfAnotherUserIsRefused() async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let file = folder + "/notes.web-auth-token"
        try "saved-token\n".write(toFile: file, atomically: true, encoding: .utf8)
        #expect(chmod(file, 0o600) == 0)
        let store: WebAuthTokenStore
        if geteuid() == 0 {
            // As root (CI) the file is given away to nobody; as anyone else it cannot be, and the
            // rule's other half is what can be checked: a file of one's own is read.
            #expect(chown(file, 65_534, 65_534) == 0)
            store = WebAuthTokenStore(configured: "configured", file: file, logger: logger)
            let error = await #expect(throws: WebAuthTokenFileFailure.self) { _ = try await store.tokenForRequest(logger: logger) }
            #expect(error?.description.contains("belongs to user 65534") == true, "\(error.map(\.description) ?? "")")
        } else {
            store = WebAuthTokenStore(configured: "configured", file: file, logger: logger)
            #expect(try await store.tokenForRequest(logger: logger) == "saved-token")
        }
    }

    /// Two processes sharing one session through one file (a Deployment's replicas): the one
    /// whose token was retired by the other's rotations goes on with the newest token the other
    /// saved, and never back to one the server refused.
    @Test func aTokenRefusedAfterAnotherProcessRotatedTheSessionGivesWayToTheOneItSaved() async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let file = folder + "/shared.web-auth-token"
        let first = WebAuthTokenStore(configured: "signed-in", file: file, logger: logger)
        #expect(try await first.tokenForRequest(logger: logger) == "signed-in")
        let second = WebAuthTokenStore(configured: "signed-in", file: file, logger: logger)
        first.received("first-1", logger: logger)
        first.received("first-2", logger: logger)
        #expect(try await first.tokenForRequest(logger: logger) == "first-2")

        #expect(await second.refused("signed-in", logger: logger))
        #expect(second.current == "first-2", "the newest token the other process saved")
        #expect(await second.refused("first-2", logger: logger))
        #expect(second.current == "first-1")
        #expect(await !second.refused("first-1", logger: logger), "every token the file holds was refused: a person must sign in")
    }

    /// Two replicas started together, before either sent a request (CI met it on a loaded
    /// machine): the second's first save does not put its configured token back alone over the
    /// tokens the first rotated to since, so once refused it goes on with the first's newest;
    /// and the first's next save keeps the second's in turn.
    @Test func aSaveKeepsTheTokensAnotherProcessSavedSince() async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let file = folder + "/shared.web-auth-token"
        let first = WebAuthTokenStore(configured: "signed-in", file: file, logger: logger)
        let second = WebAuthTokenStore(configured: "signed-in", file: file, logger: logger)
        #expect(try await first.tokenForRequest(logger: logger) == "signed-in")
        first.received("first-1", logger: logger)
        first.received("first-2", logger: logger)
        #expect(try await first.tokenForRequest(logger: logger) == "first-2")

        #expect(try await second.tokenForRequest(logger: logger) == "signed-in")
        #expect(try savedTokens(file).prefix(3) == ["signed-in", "first-2", "first-1"], "the second's token beside the first's newest")
        #expect(await second.refused("signed-in", logger: logger))
        #expect(second.current == "first-2")
        second.received("second-1", logger: logger)
        #expect(try await second.tokenForRequest(logger: logger) == "second-1")

        first.received("first-3", logger: logger)
        #expect(try await first.tokenForRequest(logger: logger) == "first-3")
        #expect(try savedTokens(file).prefix(3) == ["first-3", "second-1", "first-2"], "the newest of each first")
    }

    /// The longest token an answer may rotate to, kept as many times as the file keeps tokens,
    /// still makes a file that the next run reads; one byte longer is not taken.
    @Test func theLongestTokensTakenStillMakeAFileTheNextRunReads() async throws {
        try await withStore(configured: "configured", syncInterval: .seconds(3600)) { store, file in
            let longest = CloudKitClient.maxWebAuthTokenBytes
            for i in 1...(WebAuthTokenStore.tokensKept + 5) {
                let token = "t\(i)-" + String(repeating: "x", count: longest - "t\(i)-".utf8.count)
                store.received(token, logger: logger)
                #expect(try await store.tokenForRequest(logger: logger) == token)
            }
            store.received(String(repeating: "y", count: longest + 1), logger: logger)
            #expect(try await store.tokenForRequest(logger: logger)?.hasPrefix("t\(WebAuthTokenStore.tokensKept + 5)-") == true)
            try await store.flush(logger: logger)
            let saved = try #require(try WebAuthTokenFile(path: file).load().flatMap(WebAuthTokenFile.contents(of:)))
            #expect(saved.tokens.count == WebAuthTokenStore.tokensKept)
            #expect(saved.tokens.allSatisfy { $0.utf8.count == longest })
        }
    }

    /// A rotation header of text no token is: a line separator in it made the token file,
    /// read back, more lines than were written (a `user=` among them, shown by `status`); a
    /// control character or a non-ASCII letter is no token either. None is kept, and requests
    /// go on with the token before it.
    @Test(arguments: ["A\u{2028}earlier=B\u{2028}user=mallory", "A\u{85}user=mallory", "tok\u{1}en", "tokén", "to ken"])
    func aTokenThatIsNotPrintableASCIIIsNotTaken(_ header: String) async throws {
        try await withStore(configured: "configured", syncInterval: .seconds(3600)) { store, file in
            store.received("rotated", logger: logger)
            store.received(header, logger: logger)
            #expect(try await store.tokenForRequest(logger: logger) == "rotated")
            try await store.flush(logger: logger)
            let saved = try #require(try WebAuthTokenFile(path: file).load().flatMap(WebAuthTokenFile.contents(of:)))
            #expect(saved.tokens == ["rotated", "configured"])
            #expect(saved.userRecordName == nil)
        }
    }

    @Test func aTokenFileWithWindowsLineEndsIsRead() async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let file = folder + "/notes.web-auth-token"
        try "saved-token\r\nearlier=older-token\r\nrequests=one-at-a-time\r\n".write(toFile: file, atomically: true, encoding: .utf8)
        #expect(chmod(file, 0o600) == 0)
        let store = WebAuthTokenStore(configured: nil, file: file, logger: logger)
        #expect(try await store.tokenForRequest(logger: logger) == "saved-token")
        #expect(store.oneAtATime)
        #expect(await store.refused("saved-token", logger: logger), "the earlier token is left to try")
        #expect(store.current == "older-token")
    }

    @Test(arguments: [
        "saved-token\nearlier = older-token \nrequests= one-at-a-time\n",
        "\r\n\n  first \t\r\nearlier=a\r\n\u{0B}earlier\t=\tb\u{0C}\n \n=\nuser=_u\nrotated-at=1700000000\n",
        " \t \nearlier=x\n", "only\u{0B}earlier=y", "t\nearlier==z=\n\u{1}earlier=c\u{1}\nearlier=\n", "t\n\rEARLIER=q\nused-at= 12 \n",
    ])
    func anASCIIFileIsReadFromItsBytesAsCharactersWouldReadIt(_ text: String) {
        #expect(WebAuthTokenFile.contents(of: text) == WebAuthTokenFile.contentsOfAnyText(text))
        #expect(WebAuthTokenFile.longestLine(of: text) == text.split(whereSeparator: \.isNewline).map(\.utf8.count).max())
    }

    @Test func aTokenFileWrittenByHandWithSpacesAroundItsEqualsSignsIsRead() {
        let contents = WebAuthTokenFile.contents(of: "saved-token\nearlier = older-token \nrequests= one-at-a-time\n")
        #expect(contents?.tokens == ["saved-token", "older-token"], "a token is sent without the spaces around it")
        #expect(contents?.oneAtATime == true)
    }

    /// A rotated token that cannot be saved stops the requests: one sent with a token the file
    /// lacks moves the server past what the next run would start from.
    @Test func aRotatedTokenThatCannotBeSavedIsAnErrorNotAWarning() async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        // Its folder is a file: nothing can be written there, whoever runs the test (root too).
        try "".write(toFile: folder + "/blocker", atomically: true, encoding: .utf8)
        let file = folder + "/blocker/notes.web-auth-token"
        let store = WebAuthTokenStore(configured: "configured", file: file, logger: logger)
        store.received("rotated-1", logger: logger)
        let error = await #expect(throws: WebAuthTokenFileFailure.self) { _ = try await store.tokenForRequest(logger: logger) }
        #expect(error?.description.contains("cannot write the web auth token file \(file)") == true, "\(error.map(\.description) ?? "")")
        await #expect(throws: WebAuthTokenFileFailure.self) { try await store.flush(logger: logger) }
    }

    /// A token file that cannot be read says so, with its path and the cause, and says nothing
    /// of writing. As root (CI) a file's mode does not stop a read, so a folder stands where the
    /// file should be; as anyone else, a file of mode 000 is tried too.
    @Test func aTokenFileThatCannotBeReadSaysItCannotBeReadAndWhy() async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let aFolder = folder + "/folder.web-auth-token"
        try FileManager.default.createDirectory(atPath: aFolder, withIntermediateDirectories: false)
        var cases = [(file: aFolder, cause: "it is not a regular file")]
        if geteuid() != 0 {
            let unreadable = folder + "/unreadable.web-auth-token"
            try "saved-token\n".write(toFile: unreadable, atomically: true, encoding: .utf8)
            #expect(chmod(unreadable, 0o000) == 0)
            cases.append((unreadable, "Permission denied"))
        }
        for (file, cause) in cases {
            let store = WebAuthTokenStore(configured: "configured", file: file, logger: logger)
            let error = await #expect(throws: WebAuthTokenFileFailure.self) { _ = try await store.tokenForRequest(logger: logger) }
            let said = error?.description ?? ""
            #expect(error?.reading == true)
            #expect(said.hasPrefix("cannot read the web auth token file \(file): \(cause)"), "\(said)")
            #expect(!said.contains("write") && !said.contains("writable"), "a read failure gives no advice about writing: \(said)")
        }
    }

    /// Saved tokens that could not be read at start are read again at the next request's turn:
    /// `watch` keeps its store for its life, and one started while its database vault's server
    /// was down sent no request again until it was restarted.
    @Test func savedTokensThatCouldNotBeReadAreReadAgainOnceTheyCanBe() async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let file = folder + "/notes.web-auth-token"
        try FileManager.default.createDirectory(atPath: file, withIntermediateDirectories: false)
        let store = WebAuthTokenStore(configured: "configured", file: file, logger: logger)
        for _ in 0..<2 {
            let error = await #expect(throws: WebAuthTokenFileFailure.self) { _ = try await store.tokenForRequest(logger: logger) }
            #expect(error?.reading == true)
        }
        // The vault is back, with the token an earlier run saved: it wins over the configured
        // one, as it does at start.
        try FileManager.default.removeItem(atPath: file)
        try "saved-token\n".write(toFile: file, atomically: true, encoding: .utf8)
        #expect(chmod(file, 0o600) == 0)
        #expect(try await store.tokenForRequest(logger: logger) == "saved-token")
        store.received("rotated", logger: logger)
        #expect(try await store.tokenForRequest(logger: logger) == "rotated")
        #expect(try lines(file).first == "rotated")
    }

    /// A rotated token that cannot be written says so, with the path and the cause, and what to
    /// check. As root (CI) a folder's mode does not stop a write, so the folder is a file; as
    /// anyone else, a folder of mode 0500 is tried too.
    @Test func aTokenFileThatCannotBeWrittenSaysItCannotBeWrittenAndWhatToCheck() async throws {
        let folder = try temporaryFolder()
        defer {
            chmod(folder + "/read-only", 0o700)
            try? FileManager.default.removeItem(atPath: folder)
        }
        try "".write(toFile: folder + "/blocker", atomically: true, encoding: .utf8)
        var cases = [(file: folder + "/blocker/notes.web-auth-token", cause: "Not a directory")]
        if geteuid() != 0 {
            try FileManager.default.createDirectory(atPath: folder + "/read-only", withIntermediateDirectories: false)
            #expect(chmod(folder + "/read-only", 0o500) == 0)
            cases.append((folder + "/read-only/notes.web-auth-token", "Permission denied"))
        }
        for (file, cause) in cases {
            let store = WebAuthTokenStore(configured: nil, file: file, logger: logger)
            store.received("rotated-1", logger: logger)
            let error = await #expect(throws: WebAuthTokenFileFailure.self) { _ = try await store.tokenForRequest(logger: logger) }
            #expect(error?.reading == false)
            #expect(
                error?.description == "cannot write the web auth token file \(file) (\(cause)): check that its folder exists and is writable",
                "\(error.map(\.description) ?? "")")
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
            try? await store.flush(logger: logger)
            try? FileManager.default.removeItem(atPath: folder)
            throw error
        }
        // The writer queue is serial: the flush's write comes after every write queued before it.
        try await store.flush(logger: logger)
        try? FileManager.default.removeItem(atPath: folder)
    }

    /// The tokens the file holds, newest first.
    func savedTokens(_ file: String) throws -> [String] {
        try WebAuthTokenFile.contents(of: String(contentsOfFile: file, encoding: .utf8))?.tokens ?? []
    }

    func lines(_ file: String) throws -> [String] {
        try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n").map(String.init)
    }
}
