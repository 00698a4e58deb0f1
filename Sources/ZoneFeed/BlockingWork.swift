import Dispatch

/// Work that blocks its thread (a libpq round trip, a file read), run on Dispatch's global pool
/// rather than on one of the cooperative pool's few threads (as many as cores), which the runs,
/// the watcher and the servers of a process share.
public enum BlockingWork {
    public static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(with: Result { try body() }) }
        }
    }

    public static func run<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: body()) }
        }
    }
}
