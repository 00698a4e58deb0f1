import Foundation
import NIOPosix

/// Runs blocking work (a socket's read) on NIO's pool for blocking work: on a thread of the
/// tasks' it would hold one of the few there are (two on a two-core machine).
public func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await NIOThreadPool.singleton.runIfActive(body)
}

/// Runs blocking work that may take a long time (a socket held open for a minute) on a thread of
/// its own: on NIO's pool for blocking work it would hold one of its threads (two on a two-core
/// machine), which the other tests' libpq calls and clients share.
public func onAThreadOfItsOwn<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { done in
        Thread.detachNewThread { done.resume(with: Result { try body() }) }
    }
}
