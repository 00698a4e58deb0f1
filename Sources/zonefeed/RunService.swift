import Foundation
import ServiceLifecycle
import ZoneFeed

/// One run of a pipeline as a `Service`: a graceful shutdown (SIGINT or SIGTERM, see
/// `ShutdownSignals`) cancels the runner, which stops between batches, lets the open transaction
/// commit or roll back, and records the run as interrupted.
final class RunService: Service, @unchecked Sendable {
    private let runner: Runner
    private let lock = NSLock()
    // Guarded by `lock`.
    private var _result: Result<RunSummary, any Error>?

    init(runner: Runner) {
        self.runner = runner
    }

    /// How the run ended; nil until `run()` returns.
    var result: Result<RunSummary, any Error>? { lock.withLock { _result } }

    func run() async {
        // The outcome is kept rather than thrown: the command reports it, the group only ends.
        let result = await Result { try await cancelWhenGracefulShutdown { try await self.runner.run() } }
        lock.withLock { _result = result }
    }
}

extension Result where Failure == any Error {
    init(catching body: () async throws -> Success) async {
        do {
            self = .success(try await body())
        } catch {
            self = .failure(error)
        }
    }
}
