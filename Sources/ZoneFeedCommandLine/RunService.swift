import Foundation
import ServiceLifecycle
import Synchronization
import ZoneFeed

/// One run of a pipeline as a `Service`: a graceful shutdown (SIGINT or SIGTERM, see
/// `ShutdownSignals`) cancels the runner, which stops between batches, lets the open transaction
/// commit or roll back, and records the run as interrupted.
final class RunService: Service, Sendable {
    private let runner: Runner
    private let outcome = Mutex<Result<RunSummary, any Error>?>(nil)

    init(runner: Runner) {
        self.runner = runner
    }

    /// How the run ended; nil until `run()` returns.
    var result: Result<RunSummary, any Error>? { outcome.withLock { $0 } }

    func run() async {
        // The outcome is kept rather than thrown: the command reports it, the group only ends.
        let result = await Result { try await cancelWhenGracefulShutdown { try await self.runner.run() } }
        outcome.withLock { $0 = result }
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
