import Dispatch

/// A task executor with a thread of its own (a serial dispatch queue's), for tests whose steps
/// must run when they are due: in the full suite the cooperative pool (as many threads as cores,
/// two on CI) is shared with tests that block its threads in libpq or wait on processes, and a
/// task resumed there can wait tens of seconds for a thread. A task that prefers this executor,
/// and every child task and default actor it calls, runs here instead.
public final class DedicatedExecutor: TaskExecutor {
    private let queue: DispatchQueue

    public init(label: String) {
        queue = DispatchQueue(label: label)
        queue.setSpecific(key: Self.labelKey, value: label)
    }

    private static let labelKey = DispatchSpecificKey<String>()

    /// The label of the dedicated executor the caller runs on; nil on any other thread.
    public static var current: String? { DispatchQueue.getSpecific(key: labelKey) }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
