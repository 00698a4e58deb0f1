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
///
/// It also ends a connection kept alive past `maxAge`, after the answer it is then given (which
/// says `Connection: close`): a client that sends a whole small request every few seconds is
/// neither idle nor late, and as many such clients held every connection the listener takes.
/// A probe opens a connection each time; a scrape's reconnects once a minute.
final class RequestDeadline: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let limit: TimeAmount
    private let maxAge: TimeAmount
    private var deadline: Scheduled<Void>?
    private var opened = NIODeadline.now()
    private var closingAfterTheAnswer = false

    init(limit: TimeAmount, maxAge: TimeAmount) {
        self.limit = limit
        self.maxAge = maxAge
    }

    func handlerAdded(context: ChannelHandlerContext) {
        opened = .now()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(var response) where NIODeadline.now() - opened >= maxAge:
            closingAfterTheAnswer = true
            response.headerFields[.connection] = "close"
            context.write(wrapOutboundOut(.head(response)), promise: promise)
        case .end where closingAfterTheAnswer:
            let written = promise ?? context.eventLoop.makePromise()
            context.write(data, promise: written)
            written.futureResult.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
        default:
            context.write(data, promise: promise)
        }
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
    /// its head, is closed, and one kept alive for 60 s after its next answer.
    static var boundedHTTP1: HTTPServerBuilder {
        .http1(
            configuration: .init(
                additionalChannelHandlers: [RequestDeadline(limit: .seconds(10), maxAge: .seconds(60))], idleTimeout: .seconds(30)))
    }

    /// The most connections such a listener takes at once: whoever can reach it must not hold
    /// the file descriptors the process shares with its CloudKit and PostgreSQL connections.
    static let connections = 64
}
