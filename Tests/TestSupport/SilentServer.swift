import NIOCore
import NIOPosix

/// A TCP listener on loopback that accepts connections and never says a word: a TLS handshake
/// with it never finishes, as with a firewall that swallows the server's answers.
public final class SilentServer: Sendable {
    let channel: any Channel
    public let port: Int

    public init() async throws {
        channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in channel.eventLoop.makeSucceededVoidFuture() }
            .bind(host: "127.0.0.1", port: 0).get()
        port = channel.localAddress?.port ?? 0
    }

    public func stop() {
        channel.close(promise: nil)
    }
}
