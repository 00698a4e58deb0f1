import NIOCore
import NIOPosix
import Synchronization

/// A TCP listener on loopback that accepts connections and never says a word: a TLS handshake
/// with it never finishes, as with a firewall that swallows the server's answers, and a
/// PostgreSQL client waits for the server's first word.
public final class SilentServer: Sendable {
    let channel: any Channel
    public let port: Int
    private let accepted: AcceptedCount

    public init() async throws {
        let accepted = AcceptedCount()
        channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                accepted.count.add(1, ordering: .relaxed)
                return channel.eventLoop.makeSucceededVoidFuture()
            }
            .bind(host: "127.0.0.1", port: 0).get()
        port = channel.localAddress?.port ?? 0
        self.accepted = accepted
    }

    /// How many connections it has accepted.
    public var connections: Int { accepted.count.load(ordering: .relaxed) }

    public func stop() {
        channel.close(promise: nil)
    }
}

private final class AcceptedCount: Sendable {
    let count = Atomic<Int>(0)
}
