import AsyncHTTPClient
import CloudKitModel
import Synchronization

/// A request handed to AsyncHTTPClient on its event loop, and whether the task that sent it was
/// cancelled: before the request started, it is cancelled as soon as it does.
final class StartedRequest: Sendable {
    private struct State {
        var task: HTTPClient.Task<JSONBytes>?
        var cancelled = false
    }

    private let state = Mutex(State())

    func start(_ task: HTTPClient.Task<JSONBytes>) {
        let cancelled = state.withLock { state in
            state.task = task
            return state.cancelled
        }
        if cancelled { task.cancel() }
    }

    func cancel() {
        let task = state.withLock { state in
            state.cancelled = true
            return state.task
        }
        task?.cancel()
    }
}
