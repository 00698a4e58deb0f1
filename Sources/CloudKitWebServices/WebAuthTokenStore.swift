import Dispatch
import Foundation
import Logging
import Synchronization

/// The web auth tokens a client knows, newest first. CloudKit sends a new token in
/// `X-Apple-CloudKit-Web-Auth-Token` on every response, errors included, and Apple documents the
/// previous one as no longer good; some servers accept the last few. So:
///
/// - A token is written to the file as soon as it arrives, before its response is read, and every
///   request carries the newest token known (`tokenForRequest`) once the file has it. A process
///   killed at any moment leaves in the file the newest token it received, which the server
///   accepts unless it has answered a request since (one in flight at the kill): then it is the
///   one before the newest. The file is replaced with write and rename, without fsync; fsyncs
///   follow in the background at most every `syncInterval`, and at `flush`. A killed process
///   loses nothing that reached the page cache; only a power loss can take the file back to a
///   token some requests older.
/// - A token the server refused is forgotten (`refused`); the one received before it is tried
///   next. Requests in flight together can be answered out of order, so the token received last
///   is not always the one issued last.
/// - `oneAtATime` is learned once the server has refused a token that concurrent requests had
///   overtaken, and kept in the file for later runs.
/// - Processes that share one session through one vault (the replicas of a Deployment) each
///   rotate the token on, and each rotation can retire the token another holds. A refused token
///   sends the store back to the vault: the tokens saved there since, by another process, are
///   tried first. A save keeps them too (the vault's `update`): a process that started before
///   the other rotated anything must not put back the token it started with alone.
///
/// At start, the file's tokens win over the configured one, unless a person has configured a new
/// token since the file was written (its fingerprint in the file differs).
final class WebAuthTokenStore: Sendable {
    /// Where the tokens are kept between runs: a `WebAuthTokenFile`, or another vault.
    let file: (any WebAuthTokenVault)?
    let syncInterval: Duration
    /// The token the pipeline file gives, if any. A secret: never print it.
    private let configured: String?
    private let state: Mutex<State>
    /// File writes happen here, one at a time, off the callers' threads...
    private let writer = DispatchQueue(label: "zonefeed.web-auth-token-file")
    /// ...and fsyncs here, so that a disk slow to sync never holds up a request's write.
    private let syncer = DispatchQueue(label: "zonefeed.web-auth-token-file.sync")

    /// Enough to reach back past every request of one round of concurrent requests.
    static let tokensKept = 20

    private struct State {
        var contents: WebAuthTokenFile.Contents
        /// Bumped by every change of `contents`; `savedVersion` is the one in the file.
        var version = 0
        var savedVersion = 0
        var syncScheduled = false
        var failureLogged = false
        /// Why the saved tokens could not be read, or the newest not saved: no request is sent
        /// while it stands (one sent with a token the file lacks could lock the next run out).
        var failure: WebAuthTokenFileFailure?
        /// Tokens the server refused: never taken back from the vault, and left out of it once
        /// `taken`.
        var refused: Set<String> = []
        /// Whether the server has taken a token this run (answered a request that carried one
        /// other than with a refusal, or handed a new one): until it has, a refusal may be the
        /// API token's (CloudKit answers a wrong one `AUTHENTICATION_FAILED` whatever web auth
        /// token comes with it), and the refused tokens stay in the vault for the next run.
        var taken = false
        /// The last tokens pushed out of `contents` by newer ones: when the vault is rewritten,
        /// a token in it that is neither here nor in `contents` was saved by another process.
        var pushedOut: [String] = []
        /// How many times the file was written and synced, for tests.
        var writes = 0
        var syncs = 0

        mutating func pushOut(_ token: String) {
            pushedOut.append(token)
            if pushedOut.count > 64 { pushedOut.removeFirst() }
        }
    }

    convenience init(configured: String?, file: String?, syncInterval: Duration = .milliseconds(100), logger: Logger) {
        self.init(configured: configured, vault: file.map(WebAuthTokenFile.init(path:)), syncInterval: syncInterval, logger: logger)
    }

    init(configured: String?, vault: (any WebAuthTokenVault)?, syncInterval: Duration = .milliseconds(100), logger: Logger) {
        self.file = vault
        self.syncInterval = syncInterval
        let configured = configured.flatMap { $0.isEmpty ? nil : $0 }
        self.configured = configured
        var failure: WebAuthTokenFileFailure?
        var saved: WebAuthTokenFile.Contents?
        if let vault {
            do {
                saved = try vault.load().flatMap(WebAuthTokenFile.contents(of:))
            } catch {
                failure = WebAuthTokenFileFailure(error: error, reading: true)
            }
        }
        let (contents, version) = Self.starting(configured: configured, saved: saved, vault: vault, logger: logger)
        var state = State(contents: contents, version: version)
        state.failure = failure
        self.state = Mutex(state)
        Self.recordSession(of: contents)
    }

    /// What an alert on a session about to end watches (docs/metrics.md); absent when unknown
    /// (a token file from before these lines, a configured token).
    private static func recordSession(of contents: WebAuthTokenFile.Contents) {
        if let rotated = contents.rotatedAt { CloudKitClient.Metrics.webAuthTokenRotated().record(rotated.timeIntervalSince1970) }
        if let signedIn = contents.signedInAt { CloudKitClient.Metrics.webAuthTokenSignedIn().record(signedIn.timeIntervalSince1970) }
    }

    /// The tokens to start from, and their version (1: the vault is to be written): the vault's
    /// saved tokens, unless a person has configured a new token since they were saved.
    private static func starting(
        configured: String?, saved: WebAuthTokenFile.Contents?, vault: (any WebAuthTokenVault)?, logger: Logger
    ) -> (WebAuthTokenFile.Contents, Int) {
        var contents = WebAuthTokenFile.Contents(
            tokens: configured.map { [$0] } ?? [], configuredFingerprint: configured.map(WebAuthTokenFile.fingerprint(of:)))
        var version = 0
        if let vault, let saved {
            let file = vault.location
            if configured != nil, let fingerprint = saved.configuredFingerprint, fingerprint != contents.configuredFingerprint {
                logger.info("the configured web auth token is new since the token file was written; using it", metadata: ["file": "\(file)"])
                contents.oneAtATime = saved.oneAtATime
                version = 1
            } else {
                logger.debug("using the web auth token saved by an earlier run", metadata: ["file": "\(file)"])
                contents.tokens = saved.tokens
                contents.oneAtATime = saved.oneAtATime
                // Who signed in and when belong to the saved tokens, not to a configured one.
                contents.userRecordName = saved.userRecordName
                contents.signedInAt = saved.signedInAt
                contents.rotatedAt = saved.rotatedAt
                contents.usedAt = saved.usedAt
                // A file from before fingerprints is brought up to date with the next write.
                if saved.configuredFingerprint != contents.configuredFingerprint, contents.configuredFingerprint != nil { version = 1 }
            }
        } else if vault != nil, !contents.tokens.isEmpty {
            version = 1
        }
        return (contents, version)
    }

    /// On the writer queue, while the saved tokens could not be read at start: reads them again
    /// (a database vault whose server was down as a `watch` started, which keeps this store for
    /// its life), and starts from them as `init` would have. Nil once read; else why not.
    private func readAgain(_ file: any WebAuthTokenVault, logger: Logger) -> WebAuthTokenFileFailure? {
        let saved: WebAuthTokenFile.Contents?
        do {
            saved = try file.load().flatMap(WebAuthTokenFile.contents(of:))
        } catch {
            let failure = WebAuthTokenFileFailure(error: error, reading: true)
            state.withLock { $0.failure = failure }
            return failure
        }
        let (contents, version) = Self.starting(configured: configured, saved: saved, vault: file, logger: logger)
        state.withLock { state in
            // No request was sent meanwhile (each needs the tokens), so no token came in.
            state.contents = contents
            state.version = state.savedVersion + version
            state.failure = nil
        }
        Self.recordSession(of: contents)
        logger.info("read the saved web auth tokens again", metadata: ["file": "\(file.location)"])
        return nil
    }

    /// When the newest token arrived, from a sign-in or a response; who signed in and when.
    var rotatedAt: Date? { state.withLock { $0.contents.rotatedAt } }
    var signedInAt: Date? { state.withLock { $0.contents.signedInAt } }
    var userRecordName: String? { state.withLock { $0.contents.userRecordName } }

    /// The newest token known. A secret: never print it.
    var current: String? { state.withLock { $0.contents.tokens.first } }

    /// Whether requests must go one at a time, as learned from this server.
    var oneAtATime: Bool { state.withLock { $0.contents.oneAtATime } }

    /// The token for a request about to be sent: the newest known, once the file has it. Throws
    /// when the saved tokens could not be read or the newest cannot be saved: a request sent
    /// with a token the file lacks moves the server past what a later run can start from.
    func tokenForRequest(logger: Logger) async throws(WebAuthTokenFileFailure) -> String? {
        guard let file else { return current }
        // The file has every change already, as it has for about two requests in five of a
        // run over loopback (the answer's token was saved while the answer was read): the
        // token is handed out here, without a turn through the writer's queue.
        let saved = state.withLock { state -> String?? in
            guard state.failure == nil, state.version == state.savedVersion else { return .none }
            return .some(state.contents.tokens.first)
        }
        if let saved { return saved }
        let result = await withCheckedContinuation { (done: CheckedContinuation<Result<String?, WebAuthTokenFileFailure>, Never>) in
            writer.async { done.resume(returning: self.save(to: file, logger: logger)) }
        }
        return try result.get()
    }

    /// Takes a token from a response header.
    func received(_ newToken: String, logger: Logger) {
        let token = Self.trimmed(newToken)
        guard !token.isEmpty else { return }
        // A longer header is a proxy's or a hostile server's (`CloudKitClient.maxWebAuthTokenBytes`).
        guard token.utf8.count <= CloudKitClient.maxWebAuthTokenBytes else {
            // Never the token itself: its length says enough.
            logger.warning(
                "an answer carried a web auth token of \(token.utf8.count) bytes, where a token is a few hundred; it is not kept, and requests go on with the token before it"
            )
            return
        }
        guard CloudKitClient.isWebAuthToken(token) else {
            logger.warning(
                "an answer carried a web auth token that is not printable ASCII text, as a token is; it is not kept, and requests go on with the token before it"
            )
            return
        }
        let now = Date()
        let changed = state.withLock { state -> Bool in
            guard state.contents.tokens.first != token else { return false }
            state.contents.tokens.removeAll { $0 == token }
            state.contents.tokens.insert(token, at: 0)
            if state.contents.tokens.count > Self.tokensKept { state.pushOut(state.contents.tokens.removeLast()) }
            state.contents.rotatedAt = now
            state.contents.usedAt = now
            state.taken = true
            state.version += 1
            return true
        }
        guard changed else { return }
        CloudKitClient.Metrics.webAuthTokenRotated().record(now.timeIntervalSince1970)
        logger.trace("the server rotated the web auth token")
        // Written now rather than before the next request: a process killed while it reads
        // this response must not leave the token the server has just moved past.
        if let file { writer.async { _ = self.save(to: file, logger: logger) } }
    }

    /// The token without whitespace around it. A token that begins and ends with a printable
    /// ASCII character other than a space, as every token does, has none, and is taken as it is:
    /// Foundation's trimming goes through NSString: `received` took 1.2% of a run over loopback
    /// with it, 0.3% without (perf, one token an answer).
    static func trimmed(_ token: String) -> String {
        let printable = UInt8(ascii: "!")...UInt8(ascii: "~")
        if let first = token.utf8.first, let last = token.utf8.last, printable.contains(first), printable.contains(last) { return token }
        return token.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// CloudKit answered a request that carried a saved token, other than by refusing it:
    /// `zonefeed status` says when a run last used the token. Saved with the next write, or at
    /// `flush`; not a write of its own for every answer.
    func used(at now: Date = Date()) {
        state.withLock { state in
            state.taken = true
            if let last = state.contents.usedAt, abs(now.timeIntervalSince(last)) < 1 { return }
            state.contents.usedAt = now
            state.version += 1
        }
    }

    /// `zonefeed login` checked the newest token with `users/caller`: who it belongs to.
    func signedIn(as userRecordName: String) {
        state.withLock { state in
            state.contents.userRecordName = userRecordName
            state.version += 1
        }
    }

    /// Forgets a token the server refused and takes in the tokens saved in the vault since, by
    /// another process sharing the session, newest first. Returns whether another token is left
    /// to try.
    ///
    /// The vault is not written for a refusal, and until the server takes a token (`taken`) a
    /// save keeps the refused ones in it. CloudKit answers `AUTHENTICATION_FAILED` to a wrong
    /// API token whatever web auth token comes with it: saved without each refused token, the
    /// vault lost every token newer than its oldest, and once the API token was put right a
    /// person had to sign in again.
    func refused(_ token: String, logger: Logger) async -> Bool {
        await refusedTakingNext(token, logger: logger).left
    }

    /// `refused`, saying too whether the token tried next is newer than the refused one: it
    /// came after it (a rotation in hand, or saved by another process since), rather than
    /// before it (an earlier token, which the server may take for reasons of its own).
    func refusedTakingNext(_ token: String, logger: Logger) async -> (left: Bool, nextIsNewer: Bool) {
        var saved: [String] = []
        if let file {
            saved = await withCheckedContinuation { done in
                writer.async {
                    do {
                        done.resume(returning: try file.load().flatMap(WebAuthTokenFile.contents(of:))?.tokens ?? [])
                    } catch {
                        // The tokens in hand are still worth trying; the next save says if the
                        // vault stays out of reach.
                        logger.debug("could not read the saved web auth tokens again", metadata: ["error": "\(error)"])
                        done.resume(returning: [])
                    }
                }
            }
        }
        let (left, takenIn, newer) = state.withLock { state in
            state.refused.insert(token)
            // Tokens are newest first: any before the refused one came after it.
            let place = state.contents.tokens.firstIndex(of: token)
            state.contents.tokens.removeAll { $0 == token }
            let fresh = saved.filter { !state.refused.contains($0) && !state.pushedOut.contains($0) && !state.contents.tokens.contains($0) }
            state.contents.tokens.insert(contentsOf: fresh, at: 0)
            while state.contents.tokens.count > Self.tokensKept { state.pushOut(state.contents.tokens.removeLast()) }
            // The token tried next must be in the vault before it goes out: it is, unless a
            // save by another process pushed it out (or the vault could not be read).
            if let next = state.contents.tokens.first, !saved.contains(next) { state.version += 1 }
            // One pushed out by rotations since it went out is older than all those in hand.
            let newer = !fresh.isEmpty || place.map { $0 > 0 } == true || (place == nil && state.pushedOut.contains(token))
            return (!state.contents.tokens.isEmpty, fresh.count, newer)
        }
        if takenIn > 0 { logger.info("another process rotated the web auth token on; using the newest it saved", metadata: ["tokens": "\(takenIn)"]) }
        return (left, newer)
    }

    /// Remembers, for this run and the next ones, that this server wants one request at a time.
    func learnOneAtATime() {
        state.withLock { state in
            guard !state.contents.oneAtATime else { return }
            state.contents.oneAtATime = true
            state.version += 1
        }
    }

    /// Returns once the file has the newest token and is synced to the disk; throws when the
    /// newest token could not be saved.
    func flush(logger: Logger) async throws(WebAuthTokenFileFailure) {
        guard let file else { return }
        let saved = await withCheckedContinuation { (done: CheckedContinuation<Result<String?, WebAuthTokenFileFailure>, Never>) in
            writer.async {
                let saved = self.save(to: file, logger: logger)
                self.syncer.async {
                    self.sync(file)
                    done.resume(returning: saved)
                }
            }
        }
        _ = try saved.get()
    }

    /// How many times the file has been written and synced.
    var fileWrites: Int { state.withLock { $0.writes } }
    var fileSyncs: Int { state.withLock { $0.syncs } }

    /// On the writer queue: writes the file if it is behind, schedules a sync, and returns the
    /// newest token, which the file now has; or why it cannot have it.
    private func save(to file: any WebAuthTokenVault, logger: Logger) -> Result<String?, WebAuthTokenFileFailure> {
        // What to write and the token to hand out come from one look at the state: a token that
        // arrives after it is written by the `save` its arrival queued, behind this one.
        let (contents, version, saved, failure) = state.withLock { state in
            // With no token left, the file keeps the last ones: a person must sign in anyway.
            guard state.version != state.savedVersion, !state.contents.tokens.isEmpty else {
                return (WebAuthTokenFile.Contents?.none, state.version, state.contents.tokens.first, state.failure)
            }
            return (state.contents, state.version, state.contents.tokens.first, state.failure)
        }
        // Unreadable saved tokens stop everything: which token the server expects is unknown.
        // They are read again at each request's turn, until they can be.
        if let failure, failure.reading {
            if let still = readAgain(file, logger: logger) { return .failure(still) }
            return save(to: file, logger: logger)
        }
        guard let contents else { return .success(saved) }
        do {
            try file.update { text in
                // Another process sharing the vault may have saved tokens since this one read
                // it: they are kept, beside this one's, or a token it relies on would be lost.
                let saved = text.flatMap(WebAuthTokenFile.contents(of:))?.tokens ?? []
                // This process's own tokens first: most saved ones are, near the same place in
                // `contents`. Looking through the 64 pushed out first, for each one, made the
                // compares of a save 0.8% of the CPU of a run over HTTP, which saves once an
                // answer; now 0.3% (perf).
                let others = state.withLock { state in
                    saved.filter { !contents.tokens.contains($0) && !(state.taken && state.refused.contains($0)) && !state.pushedOut.contains($0) }
                }
                var merged = contents
                merged.tokens = Self.interleaving(contents.tokens, others)
                return WebAuthTokenFile.text(of: merged)
            }
            let scheduleSync = state.withLock { state -> Bool in
                state.savedVersion = version
                state.writes += 1
                state.failure = nil
                defer { state.syncScheduled = true }
                return !state.syncScheduled
            }
            if scheduleSync {
                syncer.asyncAfter(deadline: .now() + .milliseconds(Int(syncInterval.seconds * 1000))) { self.sync(file) }
            }
        } catch {
            let failure = WebAuthTokenFileFailure(error: error, reading: false)
            let first = state.withLock { state -> Bool in
                state.failure = failure
                defer { state.failureLogged = true }
                return !state.failureLogged
            }
            if first {
                logger.error(
                    "could not save the rotated web auth token; no request is sent with a token the file lacks",
                    metadata: ["error": "\(error)"])
            }
            return .failure(failure)
        }
        return .success(contents.tokens.first)
    }

    /// This process's tokens and another's, newest of each first, at most `tokensKept`: a
    /// process starting from the vault tries the newest of both before anything older.
    static func interleaving(_ ours: [String], _ others: [String]) -> [String] {
        var tokens: [String] = []
        for i in 0..<max(ours.count, others.count) {
            if i < ours.count { tokens.append(ours[i]) }
            if i < others.count { tokens.append(others[i]) }
        }
        return Array(tokens.prefix(tokensKept))
    }

    /// On the sync queue: whatever the file holds now reaches the disk.
    private func sync(_ file: any WebAuthTokenVault) {
        state.withLock { $0.syncScheduled = false }
        file.sync()
        state.withLock { $0.syncs += 1 }
    }
}

/// The saved web auth tokens cannot be read, or the newest cannot be saved: the run stops, as a
/// request sent regardless could leave the next run with a token the server no longer accepts.
public struct WebAuthTokenFileFailure: Error, Sendable, CustomStringConvertible {
    /// What the vault said (a path or a table, never a token).
    public let description: String
    /// Whether reading the saved tokens failed (else saving a new one).
    public let reading: Bool

    init(error: any Error, reading: Bool) {
        description = "\(error)"
        self.reading = reading
    }
}
