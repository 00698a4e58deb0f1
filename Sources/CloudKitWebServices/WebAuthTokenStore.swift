import Dispatch
import Foundation
import Logging
import NIOConcurrencyHelpers

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
///
/// At start, the file's tokens win over the configured one, unless a person has configured a new
/// token since the file was written (its fingerprint in the file differs).
final class WebAuthTokenStore: Sendable {
    /// Where the tokens are kept between runs: a `WebAuthTokenFile`, or another vault.
    let file: (any WebAuthTokenVault)?
    let syncInterval: Duration
    private let state: NIOLockedValueBox<State>
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
        /// How many times the file was written and synced, for tests.
        var writes = 0
        var syncs = 0
    }

    convenience init(configured: String?, file: String?, syncInterval: Duration = .milliseconds(100), logger: Logger) {
        self.init(configured: configured, vault: file.map(WebAuthTokenFile.init(path:)), syncInterval: syncInterval, logger: logger)
    }

    init(configured: String?, vault: (any WebAuthTokenVault)?, syncInterval: Duration = .milliseconds(100), logger: Logger) {
        self.file = vault
        self.syncInterval = syncInterval
        let configured = configured.flatMap { $0.isEmpty ? nil : $0 }
        var contents = WebAuthTokenFile.Contents(
            tokens: configured.map { [$0] } ?? [], configuredFingerprint: configured.map(WebAuthTokenFile.fingerprint(of:)))
        var version = 0
        if let vault, let saved = Self.load(from: vault, logger: logger) {
            let file = vault.location
            if configured != nil, let fingerprint = saved.configuredFingerprint, fingerprint != contents.configuredFingerprint {
                logger.info("the configured web auth token is new since the token file was written; using it", metadata: ["file": "\(file)"])
                contents.oneAtATime = saved.oneAtATime
                version = 1
            } else {
                logger.debug("using the web auth token saved by an earlier run", metadata: ["file": "\(file)"])
                contents.tokens = saved.tokens
                contents.oneAtATime = saved.oneAtATime
                // A file from before fingerprints is brought up to date with the next write.
                if saved.configuredFingerprint != contents.configuredFingerprint, contents.configuredFingerprint != nil { version = 1 }
            }
        } else if vault != nil, !contents.tokens.isEmpty {
            version = 1
        }
        state = NIOLockedValueBox(State(contents: contents, version: version))
    }

    /// The tokens a vault holds; nil, and said, when it cannot be read: the run goes on with the
    /// configured token, which a person may have just renewed.
    private static func load(from vault: any WebAuthTokenVault, logger: Logger) -> WebAuthTokenFile.Contents? {
        do {
            return try vault.load().flatMap(WebAuthTokenFile.contents(of:))
        } catch {
            logger.error("the saved web auth tokens cannot be read; starting from the configured token", metadata: ["error": "\(error)"])
            return nil
        }
    }

    /// The newest token known. A secret: never print it.
    var current: String? { state.withLockedValue { $0.contents.tokens.first } }

    /// Whether requests must go one at a time, as learned from this server.
    var oneAtATime: Bool { state.withLockedValue { $0.contents.oneAtATime } }

    /// The token for a request about to be sent: the newest known, once the file has it.
    func tokenForRequest(logger: Logger) async -> String? {
        guard let file else { return current }
        return await withCheckedContinuation { (done: CheckedContinuation<String?, Never>) in
            writer.async { done.resume(returning: self.save(to: file, logger: logger)) }
        }
    }

    /// Takes a token from a response header.
    func received(_ newToken: String, logger: Logger) {
        let token = newToken.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !token.isEmpty else { return }
        let changed = state.withLockedValue { state -> Bool in
            guard state.contents.tokens.first != token else { return false }
            state.contents.tokens.removeAll { $0 == token }
            state.contents.tokens.insert(token, at: 0)
            if state.contents.tokens.count > Self.tokensKept { state.contents.tokens.removeLast() }
            state.version += 1
            return true
        }
        guard changed else { return }
        logger.trace("the server rotated the web auth token")
        // Written now rather than before the next request: a process killed while it reads
        // this response must not leave the token the server has just moved past.
        if let file { writer.async { _ = self.save(to: file, logger: logger) } }
    }

    /// Forgets a token the server refused. Returns whether another token is left to try.
    func refused(_ token: String) -> Bool {
        state.withLockedValue { state in
            let before = state.contents.tokens.count
            state.contents.tokens.removeAll { $0 == token }
            if state.contents.tokens.count != before { state.version += 1 }
            return !state.contents.tokens.isEmpty
        }
    }

    /// Remembers, for this run and the next ones, that this server wants one request at a time.
    func learnOneAtATime() {
        state.withLockedValue { state in
            guard !state.contents.oneAtATime else { return }
            state.contents.oneAtATime = true
            state.version += 1
        }
    }

    /// Returns once the file has the newest token and is synced to the disk.
    func flush(logger: Logger) async {
        guard let file else { return }
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            writer.async {
                _ = self.save(to: file, logger: logger)
                self.syncer.async {
                    self.sync(file)
                    done.resume()
                }
            }
        }
    }

    /// How many times the file has been written and synced.
    var fileWrites: Int { state.withLockedValue { $0.writes } }
    var fileSyncs: Int { state.withLockedValue { $0.syncs } }

    /// On the writer queue: writes the file if it is behind, schedules a sync, and returns the
    /// newest token, which the file now has (unless writing failed: the run goes on with it).
    private func save(to file: any WebAuthTokenVault, logger: Logger) -> String? {
        // What to write and the token to hand out come from one look at the state: a token that
        // arrives after it is written by the `save` its arrival queued, behind this one.
        let (contents, version, saved) = state.withLockedValue { state -> (WebAuthTokenFile.Contents?, Int, String?) in
            // With no token left, the file keeps the last ones: a person must sign in anyway.
            guard state.version != state.savedVersion, !state.contents.tokens.isEmpty else {
                return (nil, state.version, state.contents.tokens.first)
            }
            return (state.contents, state.version, state.contents.tokens.first)
        }
        guard let contents else { return saved }
        do {
            try file.save(WebAuthTokenFile.text(of: contents))
            let scheduleSync = state.withLockedValue { state -> Bool in
                state.savedVersion = version
                state.writes += 1
                defer { state.syncScheduled = true }
                return !state.syncScheduled
            }
            if scheduleSync {
                syncer.asyncAfter(deadline: .now() + .nanoseconds(Int(syncInterval.seconds * 1e9))) { self.sync(file) }
            }
        } catch {
            let first = state.withLockedValue { state -> Bool in
                defer { state.failureLogged = true }
                return !state.failureLogged
            }
            if first {
                logger.error(
                    "could not save the rotated web auth token; a run after a crash may need a new one",
                    metadata: ["error": "\(error)"])
            }
        }
        return contents.tokens.first
    }

    /// On the sync queue: whatever the file holds now reaches the disk.
    private func sync(_ file: any WebAuthTokenVault) {
        state.withLockedValue { $0.syncScheduled = false }
        file.sync()
        state.withLockedValue { $0.syncs += 1 }
    }
}
