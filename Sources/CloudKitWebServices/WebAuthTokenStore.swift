import Dispatch
import Foundation
import Logging
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The newest web auth token. CloudKit sends a new one in `X-Apple-CloudKit-Web-Auth-Token` on
/// every response, errors included, and Apple says the previous one stops working; so the newest
/// is kept in memory for the next request and, when a file is configured, written there for the
/// next run. At start a token in that file wins over the configured one: it is newer.
///
/// The file is written on a queue of its own, so that a request never waits for a disk's fsync.
/// A backfill receives a new token with every page, a hundred a second, and each write costs two
/// fsyncs; so the file is written at most once per `writeInterval` (0.1 s), with the newest token
/// of that time. `flush(logger:)` writes the newest at once, and a client's `shutdown()` calls
/// it; a token that still arrives afterwards (from a request that was under way) is written at
/// once too. Only a process killed outright can leave a token older than `writeInterval` in the
/// file. A write scheduled for later may run after `flush`, and then finds nothing to write.
final class WebAuthTokenStore: Sendable {
    let file: String?
    let writeInterval: Duration
    private let token: NIOLockedValueBox<String?>
    private let saving = NIOLockedValueBox(Saving())
    private let writer = DispatchQueue(label: "zonefeed.web-auth-token-file")

    private struct Saving {
        /// The token in memory is newer than the file.
        var unsaved = false
        /// A write is scheduled or under way.
        var writing = false
        /// When the last write began.
        var lastWrite: ContinuousClock.Instant?
        /// `flush` has run: from now on each token is written as it comes.
        var flushed = false
        /// How many times the file was written, for tests.
        var writes = 0
    }

    init(configured: String?, file: String?, writeInterval: Duration = .milliseconds(100), logger: Logger) {
        self.file = file
        self.writeInterval = writeInterval
        var initial = configured.flatMap { $0.isEmpty ? nil : $0 }
        if let file, let saved = Self.read(file) {
            initial = saved
            logger.debug("using the web auth token saved by an earlier run", metadata: ["file": "\(file)"])
        }
        token = NIOLockedValueBox(initial)
    }

    var current: String? { token.withLockedValue { $0 } }

    /// Takes a token from a response header; writes it to the file when it changed.
    func received(_ newToken: String, logger: Logger) {
        let trimmed = newToken.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty else { return }
        let changed = token.withLockedValue { current -> Bool in
            guard current != trimmed else { return false }
            current = trimmed
            return true
        }
        guard changed else { return }
        logger.debug("the server rotated the web auth token")
        guard let file else { return }
        let (delay, writeNow) = saving.withLockedValue { saving -> (Duration?, Bool) in
            saving.unsaved = true
            if saving.flushed { return (nil, true) }
            guard !saving.writing else { return (nil, false) }
            saving.writing = true
            return (nextWriteDelay(saving), false)
        }
        if writeNow {
            writer.async { self.writeUnsaved(to: file, logger: logger) }
        } else if let delay {
            schedule(after: delay, file: file, logger: logger)
        }
    }

    /// How long until the file may be written again.
    private func nextWriteDelay(_ saving: Saving) -> Duration {
        guard let last = saving.lastWrite else { return .zero }
        return max(.zero, writeInterval - (ContinuousClock.now - last))
    }

    /// Runs `writeScheduled` on the writer queue once `delay` has passed: `asyncAfter` waits
    /// without holding the queue, so that `flush` can write meanwhile.
    private func schedule(after delay: Duration, file: String, logger: Logger) {
        writer.asyncAfter(deadline: .now() + .nanoseconds(Int(delay.seconds * 1e9))) {
            self.writeScheduled(to: file, logger: logger)
        }
    }

    /// On the writer queue: writes the newest token, then schedules the next write if another
    /// token came meanwhile.
    private func writeScheduled(to file: String, logger: Logger) {
        writeUnsaved(to: file, logger: logger)
        let delay = saving.withLockedValue { saving -> Duration? in
            guard saving.unsaved else {
                saving.writing = false
                return nil
            }
            return nextWriteDelay(saving)
        }
        if let delay { schedule(after: delay, file: file, logger: logger) }
    }

    /// On the writer queue: writes the newest token if the file does not have it yet.
    private func writeUnsaved(to file: String, logger: Logger) {
        let next = saving.withLockedValue { saving -> String? in
            guard saving.unsaved else { return nil }
            saving.unsaved = false
            saving.lastWrite = .now
            return current
        }
        guard let next else { return }
        do {
            try Self.writeAtomically(next, to: file)
            saving.withLockedValue { $0.writes += 1 }
        } catch {
            // The run goes on with the token in memory; the next run may start with a stale one.
            logger.error("could not save the rotated web auth token; the next run may need a new one", metadata: ["error": "\(error)"])
        }
    }

    /// Returns once the newest token received so far is in the file (or failed to be written),
    /// writing it now rather than at its scheduled time; later tokens are written as they come.
    func flush(logger: Logger) async {
        saving.withLockedValue { $0.flushed = true }
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            writer.async {
                if let file = self.file { self.writeUnsaved(to: file, logger: logger) }
                done.resume()
            }
        }
    }

    /// How many times the file has been written successfully.
    var fileWrites: Int { saving.withLockedValue { $0.writes } }

    static func read(_ path: String) -> String? {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        return trimmed.isEmpty ? nil : trimmed
    }

    /// Writes a temporary file beside the target with mode 0600, fsyncs it, renames it over the
    /// target and fsyncs the folder: a crash leaves either the old token or the new one, never a
    /// half-written file, and no other user can ever read it.
    static func writeAtomically(_ text: String, to path: String) throws {
        let folder: String
        if let slash = path.lastIndex(of: "/") {
            folder = slash == path.startIndex ? "/" : String(path[..<slash])
        } else {
            folder = "."
        }
        if !FileManager.default.fileExists(atPath: folder) {
            do {
                try FileManager.default.createDirectory(
                    atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw TokenFileError(path: path, problem: "its folder cannot be created")
            }
        }
        let name = path[(path.lastIndex(of: "/").map { path.index(after: $0) } ?? path.startIndex)...]
        let temporary = "\(folder)/.\(name).\(getpid()).\(UInt32.random(in: 0...UInt32.max)).tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw TokenFileError(path: path, problem: String(cString: strerror(errno))) }
        var ok = false
        defer {
            if !ok { unlink(temporary) }
        }
        do {
            defer { close(fd) }
            // umask may have removed bits, never added them; make the mode exact anyway.
            guard fchmod(fd, 0o600) == 0 else { throw TokenFileError(path: path, problem: String(cString: strerror(errno))) }
            var bytes = Array((text + "\n").utf8)[...]
            while !bytes.isEmpty {
                let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                if written < 0 {
                    if errno == EINTR { continue }
                    throw TokenFileError(path: path, problem: String(cString: strerror(errno)))
                }
                bytes = bytes.dropFirst(written)
            }
            guard fsync(fd) == 0 else { throw TokenFileError(path: path, problem: String(cString: strerror(errno))) }
        }
        guard rename(temporary, path) == 0 else { throw TokenFileError(path: path, problem: String(cString: strerror(errno))) }
        ok = true
        let folderFD = open(folder, O_RDONLY | O_CLOEXEC)
        if folderFD >= 0 {
            _ = fsync(folderFD)
            close(folderFD)
        }
    }
}

struct TokenFileError: Error, CustomStringConvertible {
    var path: String
    var problem: String
    var description: String {
        "cannot write the web auth token file \(path) (\(problem)): check that its folder exists and is writable"
    }
}
