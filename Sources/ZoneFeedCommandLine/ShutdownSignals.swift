import Foundation
import ServiceLifecycle
import Synchronization
import UnixSignals

/// SIGINT and SIGTERM while a command works: the first asks its `ServiceGroup` for a graceful
/// shutdown, a second means "now" and exits at once (the server rolls back an open transaction).
///
/// The group is not given the signals itself (`gracefulShutdownSignals`) because the command's
/// exit status must say which one came (130 for SIGINT, 143 for SIGTERM), and the group does not
/// tell.
final class ShutdownSignals: Sendable {
    private let signals: UnixSignalsSequence
    private let first = LockedSignal()

    /// Traps the signals before it returns, so that no signal sent after it finds the default action.
    init() async {
        signals = await UnixSignalsSequence(trapping: .sigint, .sigterm)
    }

    /// The first signal received, if any.
    var received: UnixSignal? { first.value }

    /// 130 for SIGINT, 143 for SIGTERM.
    var exitCode: Int32? { received.map { 128 + $0.rawValue } }

    /// Until cancelled: the first signal runs `onFirst`, a second exits the process.
    func watch(onFirst: @Sendable () async -> Void) async {
        for await signal in signals {
            if first.set(signal) {
                await onFirst()
            } else {
                exit(128 + signal.rawValue)
            }
        }
    }

    /// Runs `group` until it ends, shutting it down gracefully on the first signal. After it,
    /// the signals have their default action again (the sequence left them ignored): a command
    /// run in-process, as a test runs one, leaves the process as it found it.
    func run(_ group: ServiceGroup) async throws {
        defer {
            signal(SIGINT, SIG_DFL)
            signal(SIGTERM, SIG_DFL)
        }
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { await self.watch { await group.triggerGracefulShutdown() } }
            defer { tasks.cancelAll() }
            try await group.run()
        }
    }
}

private final class LockedSignal: Sendable {
    private let signal = Mutex<UnixSignal?>(nil)

    var value: UnixSignal? { signal.withLock { $0 } }

    /// Whether this was the first.
    func set(_ new: UnixSignal) -> Bool {
        signal.withLock { signal in
            guard signal == nil else { return false }
            signal = new
            return true
        }
    }
}
