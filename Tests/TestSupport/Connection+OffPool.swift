import LibPQ
import NIOPosix

extension Connection {
    /// `withConnection` on NIO's pool for blocking work: a test's look at the database blocks in
    /// libpq, and on the cooperative pool (as many threads as cores) it would hold a thread that
    /// the servers the tests run in process need.
    public static func withConnectionOffPool<T: Sendable>(_ conninfo: String, _ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        try await NIOThreadPool.singleton.runIfActive { try Connection.withConnection(conninfo, body) }
    }
}

extension Connection {
    /// `body` with this connection, on NIO's pool for blocking work.
    public func offPool<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        try await NIOThreadPool.singleton.runIfActive { try body(self) }
    }
}
