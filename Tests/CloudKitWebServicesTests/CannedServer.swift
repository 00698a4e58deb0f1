import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// A tiny HTTP/1.1 server on loopback that answers each request with the next canned reply and
/// records what it received, so tests exercise the real client, sockets included.
final class CannedServer: Sendable {
    struct Request: Sendable {
        var method: HTTPMethod
        /// The request target as sent: path and raw (still percent-encoded) query.
        var uri: String
        var headers: HTTPHeaders
        var body: [UInt8]

        var path: String { String(uri.prefix { $0 != "?" }) }
        var query: String { uri.firstIndex(of: "?").map { String(uri[uri.index(after: $0)...]) } ?? "" }
        var bodyText: String { String(decoding: body, as: UTF8.self) }

        /// A query parameter's raw value, still percent-encoded.
        func rawQueryValue(_ name: String) -> String? {
            for pair in query.split(separator: "&") where pair.hasPrefix("\(name)=") {
                return String(pair.dropFirst(name.count + 1))
            }
            return nil
        }
    }

    enum Reply: Sendable {
        case respond(status: Int, headers: [(String, String)], body: [UInt8])
        /// Announces `declaredLength` bytes, sends `body`, and closes the connection.
        case cutShort(declaredLength: Int, body: [UInt8])
        /// Sends the head at once, then the body one byte every `interval`, as a server (or a
        /// proxy) that answers at once and then all but stops.
        case trickle(body: [UInt8], interval: TimeAmount)

        static func json(_ status: Int = 200, _ text: String, headers: [(String, String)] = []) -> Reply {
            .respond(status: status, headers: [("Content-Type", "application/json")] + headers, body: Array(text.utf8))
        }

        static func error(_ status: Int, code: String, reason: String = "", retryAfter: Double? = nil, headers: [(String, String)] = []) -> Reply {
            let retry = retryAfter.map { ",\"retryAfter\":\($0)" } ?? ""
            return .json(status, "{\"uuid\":\"uuid-\(status)\",\"serverErrorCode\":\"\(code)\",\"reason\":\"\(reason)\"\(retry)}", headers: headers)
        }
    }

    private struct State {
        var replies: [Reply] = []
        var requests: [Request] = []
        /// Answered when the queue is empty; nil answers 500 "no canned reply".
        var fallback: Reply?
        /// Asked first for every request: a reply chosen by what the request asks, or nil for
        /// the queue's.
        var route: (@Sendable (Request) -> Reply?)?
    }

    private let state = NIOLockedValueBox(State())
    private let channel: NIOLockedValueBox<(any Channel)?> = NIOLockedValueBox(nil)

    static func start() async throws -> CannedServer {
        let server = CannedServer()
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(Handler(server: server))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        server.channel.withLockedValue { $0 = channel }
        return server
    }

    var port: Int { channel.withLockedValue { $0?.localAddress?.port ?? 0 } }
    var baseURL: String { "http://127.0.0.1:\(port)" }

    func enqueue(_ replies: Reply...) {
        state.withLockedValue { $0.replies += replies }
    }

    /// The reply for every request once the queue is empty.
    func always(_ reply: Reply) {
        state.withLockedValue { $0.fallback = reply }
    }

    /// Replies chosen by what each request asks (nil: the queue's), for requests in flight at
    /// once, whose order of arrival is not the test's to choose.
    func route(_ answer: @escaping @Sendable (Request) -> Reply?) {
        state.withLockedValue { $0.route = answer }
    }

    var requests: [Request] { state.withLockedValue { $0.requests } }

    func stop() async throws {
        try await channel.withLockedValue { $0 }?.close()
    }

    fileprivate func reply(to request: Request) -> Reply {
        state.withLockedValue { state in
            state.requests.append(request)
            if let reply = state.route?(request) { return reply }
            if !state.replies.isEmpty { return state.replies.removeFirst() }
            return state.fallback ?? .json(500, "{\"serverErrorCode\":\"INTERNAL_ERROR\",\"reason\":\"no canned reply\"}")
        }
    }

    private final class Handler: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart

        let server: CannedServer
        var head: HTTPRequestHead?
        var body: [UInt8] = []

        init(server: CannedServer) { self.server = server }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let head):
                self.head = head
                body = []
            case .body(let buffer):
                body += buffer.readableBytesView
            case .end:
                guard let head else { return }
                let request = Request(method: head.method, uri: head.uri, headers: head.headers, body: body)
                switch server.reply(to: request) {
                case .respond(let status, let extra, let bytes):
                    var headers = HTTPHeaders(extra)
                    headers.replaceOrAdd(name: "Content-Length", value: "\(bytes.count)")
                    context.write(
                        wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: .init(statusCode: status), headers: headers))), promise: nil)
                    context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: bytes)))), promise: nil)
                    context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
                case .cutShort(let declared, let bytes):
                    let headers = HTTPHeaders([("Content-Type", "application/json"), ("Content-Length", "\(declared)")])
                    context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: .ok, headers: headers))), promise: nil)
                    context.writeAndFlush(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: bytes)))), promise: nil)
                    context.close(promise: nil)
                case .trickle(let bytes, let interval):
                    let headers = HTTPHeaders([("Content-Type", "application/json"), ("Content-Length", "\(bytes.count)")])
                    context.writeAndFlush(
                        wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: .ok, headers: headers))), promise: nil)
                    let loop = context.eventLoop.assumeIsolated()
                    for (i, byte) in bytes.enumerated() {
                        loop.scheduleTask(in: interval * Int64(i + 1)) {
                            guard context.channel.isActive else { return }
                            context.writeAndFlush(self.wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: [byte])))), promise: nil)
                            if i == bytes.count - 1 { context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil) }
                        }
                    }
                }
                self.head = nil
            }
        }
    }
}
