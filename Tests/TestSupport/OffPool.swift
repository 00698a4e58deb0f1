import NIOPosix

/// Runs blocking work (a socket's read) on NIO's pool for blocking work: on a thread of the
/// tasks' it would hold one of the few there are (two on a two-core machine).
public func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await NIOThreadPool.singleton.runIfActive(body)
}
