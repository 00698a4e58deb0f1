import CloudKitModel
import Hummingbird
import Logging
import NIOCore

/// The request context: Hummingbird's basics plus the client's address, since the admin
/// endpoints answer loopback clients only, and the connection the request came on (an HTTP/2
/// stream's connection), for the misdirected-connection fault and the connection count.
struct FakeServerContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    let remoteIP: String?
    let connection: any Channel

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteIP = source.channel.remoteAddress?.ipAddress
        // An HTTP/2 stream's parent is its connection; an accepted connection's parent is the
        // listening socket, which has none.
        connection = source.channel.parent.flatMap { $0.parent == nil ? nil : $0 } ?? source.channel
    }
}

/// Turns HTTP requests into calls on the store and its replies into HTTP responses: the rotated
/// web auth token header, injected delays, and the cut-short body.
struct FakeCloudKitResponder: HTTPResponder {
    typealias Context = FakeServerContext

    let store: FakeCloudKitStore
    let origin: Origin

    /// The server's two origins. Each answers 421 Misdirected Request to the other's paths, as
    /// Apple's edge does to a request sent on a connection made for another host.
    enum Origin: Sendable {
        /// CloudKit's API and the admin endpoints.
        case api
        /// The web courier's long polls.
        case courier
    }

    static let maxBody = 16 << 20

    struct CutShort: Error {}

    func respond(to request: Request, context: Context) async throws -> Response {
        let path = request.uri.path
        let body: [UInt8]
        do {
            let buffer = try await request.body.collect(upTo: Self.maxBody)
            body = Array(buffer.readableBytesView)
        } catch {
            return Self.response(.error(413, "BAD_REQUEST", "request body larger than \(Self.maxBody) bytes"))
        }
        if origin == .courier {
            guard path.hasPrefix("/courier/") else { return Self.misdirected }
            // The web courier: its own URL, the push token in it, no CloudKit authentication.
            return Self.response(await store.pollCourier(token: String(path.dropFirst("/courier/".count))))
        }
        if path.hasPrefix("/courier/") { return Self.misdirected }
        if path == "/admin" || path.hasPrefix("/admin/") {
            guard Self.isLoopback(context.remoteIP) else {
                return Self.response(.adminError("admin endpoints answer loopback clients only", status: 403))
            }
            let reply = await store.handleAdmin(method: request.method.rawValue, path: path, body: body)
            context.logger.debug("admin request", metadata: ["path": "\(path)", "status": "\(reply.status)"])
            return Self.response(reply)
        }
        if path == "/signin" {
            // The browser sign-in page a 421's redirectURL points at (FakeCloudKitStore+SignIn).
            let form = Self.formDecode(request.method == .post ? String(decoding: body, as: UTF8.self) : request.uri.query)
            return Self.response(await store.handleSignIn(method: request.method.rawValue, form: form))
        }
        if await store.arrived(on: context.connection) { return Self.misdirected }
        let query = Self.formDecode(request.uri.query)
        var cloudKitRequest = FakeCloudKitStore.CloudKitRequest(
            method: request.method.rawValue, path: path, apiToken: query["ckAPIToken"],
            webAuthToken: query["ckWebAuthToken"], body: body)
        if let keyID = request.headers[.init("X-Apple-CloudKit-Request-KeyID")!] {
            cloudKitRequest.signature = FakeCloudKitStore.RequestSignature(
                keyID: keyID, date: request.headers[.init("X-Apple-CloudKit-Request-ISO8601Date")!] ?? "",
                signature: request.headers[.init("X-Apple-CloudKit-Request-SignatureV1")!] ?? "")
        }
        cloudKitRequest.courierHost = Self.host(ofAuthority: request.head.authority)
        cloudKitRequest.apiOrigin = "\(store.configuration.scheme)://\(request.head.authority ?? "127.0.0.1")"
        let request = cloudKitRequest
        // In flight from its arrival until its response leaves, the latency included.
        let result = await store.handleInFlight(request)
        context.logger.debug(
            "CloudKit request",
            metadata: [
                "method": "\(request.method)", "path": "\(path)", "status": "\(result.reply.status)",
            ])
        return Self.response(result.reply, rotatedToken: result.rotatedToken, delivery: result.delivery)
    }

    /// What Apple's edge answers on a connection made for another host: 421 and a page of its
    /// own, not CloudKit's JSON error body.
    static var misdirected: Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/html; charset=utf-8"
        let page = "<html><head><title>421 Misdirected Request</title></head><body><h1>Misdirected Request</h1></body></html>"
        return Response(status: .misdirectedRequest, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: page)))
    }

    /// `127.0.0.1` of `127.0.0.1:8765`, `[::1]` of `[::1]:8765`; `127.0.0.1` without an authority.
    static func host(ofAuthority authority: String?) -> String {
        guard let authority, !authority.isEmpty else { return "127.0.0.1" }
        if authority.hasPrefix("["), let close = authority.firstIndex(of: "]") { return String(authority[...close]) }
        return String(authority.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)[0])
    }

    static func response(_ reply: Reply, rotatedToken: String? = nil, delivery: FakeCloudKitStore.Delivery = .whole) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = reply.contentType
        if let rotatedToken { headers[.init("X-Apple-CloudKit-Web-Auth-Token")!] = rotatedToken }
        // Names were checked to be HTTP tokens when the fault was set (`isHeaderName`).
        for header in reply.headers where isHeaderName(header.name) { headers[.init(header.name)!] = header.value }
        let buffer = ByteBuffer(bytes: reply.body)
        switch delivery {
        case .whole:
            return Response(status: .init(code: reply.status), headers: headers, body: ResponseBody(byteBuffer: buffer))
        case .cutShort(let bytes):
            // The head promises the whole body; part of it is sent, then the connection is closed
            // (an error thrown while writing the body makes Hummingbird close the channel).
            let part = buffer.getSlice(at: 0, length: min(bytes ?? buffer.readableBytes / 2, buffer.readableBytes)) ?? ByteBuffer()
            return Response(
                status: .init(code: reply.status), headers: headers,
                body: ResponseBody(contentLength: buffer.readableBytes) { writer in
                    if part.readableBytes > 0 { try await writer.write(part) }
                    try await Task.sleep(for: .milliseconds(20))
                    throw CutShort()
                })
        case .trickle(let interval):
            return Response(
                status: .init(code: reply.status), headers: headers,
                body: ResponseBody(contentLength: buffer.readableBytes) { writer in
                    for index in 0..<buffer.readableBytes {
                        try await Task.sleep(for: interval)
                        if let byte = buffer.getSlice(at: index, length: 1) { try await writer.write(byte) }
                    }
                    try await writer.finish(nil)
                })
        }
    }

    static func isLoopback(_ ip: String?) -> Bool {
        guard let ip else { return true }  // a Unix socket
        return ip.hasPrefix("127.") || ip == "::1" || ip.hasPrefix("::ffff:127.")
    }

    /// `application/x-www-form-urlencoded` decoding of a query string: `+` is a space and
    /// `%XX` a byte, which is why CloudKit asks for `+`, `/` and `=` to be percent-encoded.
    static func formDecode(_ query: String?) -> [String: String] {
        var out: [String: String] = [:]
        guard let query else { return out }
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = percentDecode(parts[0])
            if out[name] == nil { out[name] = parts.count > 1 ? percentDecode(parts[1]) : "" }
        }
        return out
    }

    static func percentDecode(_ text: Substring) -> String {
        let utf8 = Array(text.utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count)
        var i = 0
        while i < utf8.count {
            let c = utf8[i]
            if c == UInt8(ascii: "+") {
                bytes.append(UInt8(ascii: " "))
            } else if c == UInt8(ascii: "%"), i + 2 < utf8.count, let hi = hexValue(utf8[i + 1]), let lo = hexValue(utf8[i + 2]) {
                bytes.append(hi << 4 | lo)
                i += 2
            } else {
                bytes.append(c)
            }
            i += 1
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
