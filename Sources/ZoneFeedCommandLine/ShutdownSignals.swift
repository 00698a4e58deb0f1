import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import UnixSignals

/// SIGINT and SIGTERM for the whole of a command, from its start to its exit. While the command
/// is in a part that can stop gracefully (`handling`, `run`), the first signal asks it to (a
/// run's `ServiceGroup` shuts down, a bench ends its children) and a second exits at once (the
/// server rolls back an open transaction). Elsewhere (starting: reading the pipeline, opening the
/// destination; ending: closing it, pushing metrics) a signal exits at once, as the default
/// action would: the signals are trapped all the same, because as a container's PID 1 the
/// process has no default action, and a signal the kernel drops there left a pod to be killed a
/// grace period later.
///
/// The group is not given the signals itself (`gracefulShutdownSignals`) because the command's
/// exit status must say which one came (130 for SIGINT, 143 for SIGTERM), and the group does not
/// tell.
final class ShutdownSignals: Sendable {
    private let state: LockedState
    private let listener: Task<Void, Never>

    /// Traps the signals before it returns, so that no signal sent after it finds the default
    /// action, and listens until `end()`.
    init() async {
        let signals = await UnixSignalsSequence(trapping: .sigint, .sigterm)
        let state = LockedState()
        self.state = state
        listener = Task {
            for await signal in signals {
                if let onFirst = state.take(signal) {
                    await onFirst()
                } else {
                    // What is written is flushed, then the process ends at once: `exit` would
                    // run handlers and destructors while libpq's and NIO's threads are busy,
                    // which may wait on them, where the default action waited on nothing.
                    fflush(nil)
                    _exit(128 + signal.rawValue)
                }
            }
        }
    }

    /// The first signal received, if any.
    var received: UnixSignal? { state.received }

    /// 130 for SIGINT, 143 for SIGTERM.
    var exitCode: Int32? { received.map { 128 + $0.rawValue } }

    /// Runs `body`; a first signal meanwhile runs `onFirst` (which makes `body` end soon), a
    /// second exits the process.
    func handling<T>(onFirst: @escaping @Sendable () async -> Void, _ body: () async throws -> T) async rethrows -> T {
        state.setHandler(onFirst)
        defer { state.setHandler(nil) }
        return try await body()
    }

    /// Runs `group` until it ends, shutting it down gracefully on the first signal, which says
    /// so: a person who pressed Ctrl-C learns that a second one stops at once.
    func run(_ group: ServiceGroup, logger: Logger) async throws {
        try await handling(onFirst: {
            logger.notice(
                "stopping: the open transaction commits or rolls back first; a second signal stops at once",
                metadata: ["signal": "\(self.received.map { "\($0)" } ?? "?")"])
            await group.triggerGracefulShutdown()
        }) { try await group.run() }
    }

    /// Stops listening; the signals have their default action again (the sequence left them
    /// ignored): a command run in-process, as a test runs one, leaves the process as it found it.
    func end() {
        listener.cancel()
        signal(SIGINT, SIG_DFL)
        signal(SIGTERM, SIG_DFL)
    }
}

private final class LockedState: Sendable {
    private struct State {
        var received: UnixSignal?
        var onFirst: (@Sendable () async -> Void)?
    }

    private let state = Mutex(State())

    var received: UnixSignal? { state.withLock { $0.received } }

    func setHandler(_ onFirst: (@Sendable () async -> Void)?) { state.withLock { $0.onFirst = onFirst } }

    /// Takes `signal` in: what to run for it, or nil when it must exit the process (it is not
    /// the first, or nothing can stop gracefully now).
    func take(_ signal: UnixSignal) -> (@Sendable () async -> Void)? {
        state.withLock { state in
            guard state.received == nil else { return nil }
            state.received = signal
            return state.onFirst
        }
    }
}
