import HummingbirdCore
import NIOCore
import NIOHTTPTypes

/// Closes a connection whose request has begun and is not whole `limit` after its head came.
///
/// Hummingbird's idle timeout counts from the last part read, and each piece of a request's
/// body is a part: a client that announces a long body and sends a byte of it every few seconds
/// keeps its connection for ever, and as many such clients as the listener takes connections
/// hold every one of them (a probe then waits behind them, and the pod is restarted as dead).
/// The time a request may take to arrive is counted from its head instead, whatever comes after;
/// a connection that never sends a whole head is the idle timeout's. A probe's or a scrape's
/// request arrives in one piece, in well under a millisecond.
final class RequestDeadline: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart

    private let limit: TimeAmount
    private var deadline: Scheduled<Void>?

    init(limit: TimeAmount) {
        self.limit = limit
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            deadline?.cancel()
            deadline = context.eventLoop.assumeIsolated().scheduleTask(in: limit) { context.close(promise: nil) }
        case .end:
            deadline?.cancel()
            deadline = nil
        case .body:
            break
        }
        context.fireChannelRead(data)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        deadline?.cancel()
        deadline = nil
    }
}

@available(*, unavailable)
extension RequestDeadline: Sendable {}

extension RequestDeadline {
    /// HTTP/1 as zonefeed's own small listeners serve it (watch's `/healthz` and `/metrics`,
    /// login's callback): a connection idle for 30 s, or whose request is not whole 10 s after
    /// its head, is closed.
    static var boundedHTTP1: HTTPServerBuilder {
        .http1(configuration: .init(additionalChannelHandlers: [RequestDeadline(limit: .seconds(10))], idleTimeout: .seconds(30)))
    }

    /// The most connections such a listener takes at once: whoever can reach it must not hold
    /// the file descriptors the process shares with its CloudKit and PostgreSQL connections.
    static let connections = 64
}
