import NIOCore
import NIOPosix
import Synchronization

/// An HTTP listener on loopback that answers every request with a head that announces a body
/// (`status`, `Content-Length: 1000`) and then never sends the body, as a stalled proxy might.
public final class HeadOnlyServer: Sendable {
    let channel: any Channel
    public let port: Int
    public var url: String { "http://127.0.0.1:\(port)" }
    private let answered = RequestLines()

    /// The request lines (`POST /metrics/job/… HTTP/1.1`) of the requests it answered.
    public var requestsAnswered: [String] { answered.lines.withLock { $0 } }

    final class RequestLines: Sendable {
        let lines = Mutex<[String]>([])
    }

    public init(status: Int = 200) async throws {
        let answered = answered
        channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        HeadOnly(status: status) { line in answered.lines.withLock { $0.append(line) } })
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        port = channel.localAddress?.port ?? 0
    }

    public func stop() {
        channel.close(promise: nil)
    }

    /// Answers once the request's head has come in whole; reads the rest and says nothing more.
    final class HeadOnly: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        let status: Int
        let note: @Sendable (String) -> Void
        private var received: [UInt8] = []
        private var answered = false

        init(status: Int, note: @escaping @Sendable (String) -> Void) {
            self.status = status
            self.note = note
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard !answered else { return }
            received += Array(buffer: unwrapInboundIn(data))
            guard received.count >= 4, (0...(received.count - 4)).contains(where: { received[$0..<$0 + 4].elementsEqual([13, 10, 13, 10]) }) else {
                return
            }
            answered = true
            note(String(decoding: received.prefix { $0 != 13 }, as: UTF8.self))
            context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: "HTTP/1.1 \(status) Stalled\r\nContent-Length: 1000\r\n\r\n")), promise: nil)
        }
    }
}
