import Dispatch

/// A task executor with a thread of its own: a serial Dispatch queue, which runs on an
/// overcommit thread rather than on one of the cooperative pool's (as many as cores). A test's
/// in-process server runs on one so that it answers as a server in a process of its own would,
/// however long the CPU-bound work (generating feeds and expected states) that the tests beside
/// it keep on the cooperative pool: with two cores, that work once held a harness's requests
/// past their 20-second deadline.
final class OwnThreadExecutor: TaskExecutor {
    private let queue: DispatchQueue

    init(label: String) {
        queue = DispatchQueue(label: label)
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
