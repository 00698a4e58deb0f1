import AsyncHTTPClient
@_exported import CloudKitModel
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix

/// A client for CloudKit Web Services (`/database/1/{container}/{environment}/{database}/…`).
///
/// - Authentication: the API token and the web auth token go in the query string, strictly
///   percent-encoded; the token CloudKit rotates on every response (errors too) is kept, and saved
///   to `webAuthTokenFile` when one is configured. With a `serverKey` every request is also signed.
/// - Failures: throttling, unavailability, 5xx, network faults, timeouts and bodies that are cut
///   short or not JSON are retried with exponential backoff and full jitter, honouring the
///   server's `retryAfter` and `Retry-After`, within `retry.maxAttempts` and `retry.budget`.
///   Everything else throws a `CloudKitError` at once.
/// - Concurrency: up to `maxConcurrentRequests` requests are in flight at once, each carrying the
///   newest web auth token known. Throttling pauses them all and lowers the limit, successes
///   raise it again (`RequestLimiter`). A server that refuses a token other requests overtook
///   gets one request at a time from then on, for this run and, through the token file, later
///   ones.
///
/// Use `withClient` to have the client shut down on every path, or pass an `HTTPClient` you own.
public final class CloudKitClient: Sendable {
    public let configuration: Configuration
    let connections: RenewableHTTPClient
    let logger: Logger
    let tokens: WebAuthTokenStore
    let signer: RequestSigner?
    let limiter: RequestLimiter
    /// `https://host:port` and any path prefix of `baseURL`, without a trailing slash.
    let origin: String
    let pathPrefix: String

    /// - Parameters:
    ///   - httpClient: a client owned by the caller; when nil the client makes its own, with
    ///     redirects off, the configured timeouts and TLS trust, and `shutdown()` must be called.
    public init(configuration: Configuration, httpClient: HTTPClient? = nil, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
        if let httpClient {
            connections = RenewableHTTPClient(callersClient: httpClient)
        } else {
            let http = Self.httpConfiguration(configuration)
            // Every connection on one event loop, the loop requests are handed over on
            // (`attemptOnce`): an answer then never hops to another loop's thread on its way.
            // One loop reads far more than a run decodes (a fifth of a core at 50,000 records/s
            // over loopback, perf).
            connections = RenewableHTTPClient(owned: {
                HTTPClient(
                    eventLoopGroupProvider: .shared(MultiThreadedEventLoopGroup.singleton.next()), configuration: http,
                    backgroundActivityLogger: logger)
            })
        }
        tokens = WebAuthTokenStore(
            configured: configuration.webAuthToken,
            vault: configuration.webAuthTokenVault ?? configuration.webAuthTokenFile.map(WebAuthTokenFile.init(path:)), logger: logger)
        signer = configuration.serverKey.map { RequestSigner(key: $0) }
        limiter = RequestLimiter(maxConcurrent: configuration.maxConcurrentRequests, oneAtATime: tokens.oneAtATime)
        (origin, pathPrefix) = Self.split(baseURL: configuration.baseURL)
    }

    /// AsyncHTTPClient's settings for the API's connections.
    static func httpConfiguration(_ configuration: Configuration) -> HTTPClient.Configuration {
        // `read` is AsyncHTTPClient's idle timeout: the longest it waits for the next bytes,
        // of the head or the body. The whole answer's deadline is the request's (`timeout`).
        // The connection, TLS handshake included, must be made within half of it, so that a
        // handshake that never ends is told from an answer that does not come.
        let timeout = configuration.timeout.timeAmount
        var http = HTTPClient.Configuration(
            tlsConfiguration: configuration.tlsTrust.clientConfiguration,
            redirectConfiguration: .disallow,
            timeout: .init(connect: Self.connectTimeout(configuration), read: min(timeout, configuration.idleTimeout.timeAmount)))
        // HTTP/2 where the server offers it by ALPN (CloudKit's edge does): one connection
        // carries every request in flight as its own stream. HTTP/1.1 otherwise, where a
        // connection carries one request at a time and the pool keeps 8 per host unless told:
        // as many as may be in flight (measured: 8 in flight at most, and half the WAN phase's
        // throughput, before).
        http.httpVersion = .automatic
        http.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = max(8, configuration.maxConcurrentRequests)
        // A connection that cannot be made fails the requests waiting for it at once, with its
        // cause, and the retry policy decides: AsyncHTTPClient would otherwise retry it until
        // each request's deadline, and a certificate that does not verify never will.
        http.connectionPool.retryConnectionEstablishment = false
        // No spans: zonefeed installs no tracer, and AsyncHTTPClient otherwise starts and ends a
        // span of the global one, a no-op, for every request, its name and attributes made as
        // text all the same: 1.3% of a run over loopback HTTP (perf).
        http.tracing.tracer = nil
        return http
    }

    /// Half the answer's deadline, and at most 30 s.
    static func connectTimeout(_ configuration: Configuration) -> TimeAmount {
        min(Duration.bounded(seconds: configuration.timeout.seconds / 2, atMost: .seconds(30)).timeAmount, .seconds(30))
    }

    /// Waits until the newest web auth token is saved, then shuts down the HTTP client if this
    /// client made it; a caller's client is left alone.
    public func shutdown() async throws {
        do {
            try await tokens.flush(logger: logger)
        } catch {
            try? await connections.shutdown()
            throw error
        }
        try await connections.shutdown()
    }

    /// Runs `body` with a client that is shut down afterwards, whatever happens. The client is
    /// made on NIO's pool for blocking work: it reads its token store (a file, or a database
    /// through the vault) as it is made.
    public static func withClient<Result: Sendable>(
        configuration: Configuration, httpClient: HTTPClient? = nil, logger: Logger,
        _ body: (CloudKitClient) async throws -> Result
    ) async throws -> Result {
        let client = try await NIOThreadPool.singleton.runIfActive {
            CloudKitClient(configuration: configuration, httpClient: httpClient, logger: logger)
        }
        let result: Result
        do {
            result = try await body(client)
        } catch {
            try? await client.shutdown()
            throw error
        }
        try await client.shutdown()
        return result
    }

    /// The web auth token the next request will carry: the newest the server sent, else the one
    /// from `webAuthTokenFile`, else the configured one. A secret: never print it.
    public var webAuthToken: String? { tokens.current }

    /// How long requests were paused because the server throttled them, in seconds.
    public var throttledSeconds: Double { get async { await limiter.throttledSeconds } }

    /// The most requests that were in flight at once.
    public var peakRequestsInFlight: Int { get async { await limiter.peakInFlight } }

    /// Whether requests go one at a time, because the server refused overtaken tokens.
    public var sendsOneAtATime: Bool { get async { await limiter.oneAtATime } }

    /// Whether an earlier run learned that this server wants one request at a time.
    public var learnedOneAtATime: Bool { tokens.oneAtATime }

    // MARK: Requests

    enum Scope {
        /// `/database/1/{container}/{environment}/{database}/…`
        case database
        /// `/database/1/{container}/{environment}/public/…`, for the `users/…` endpoints.
        case publicDatabase
        /// `/device/1/{container}/{environment}/…`, where the live service serves `tokens/…`
        /// (the documented `/database/…` path answers 405).
        case device
    }

    /// The URL path of an operation, as sent and as signed.
    func path(for operation: String, scope: Scope) -> String {
        if scope == .device {
            return "\(pathPrefix)/device/1/\(PercentEncoding.encode(configuration.container))/\(configuration.environment.rawValue)/\(operation)"
        }
        let database = scope == .publicDatabase ? "public" : configuration.database.rawValue
        return "\(pathPrefix)/database/1/\(PercentEncoding.encode(configuration.container))/"
            + "\(configuration.environment.rawValue)/\(database)/\(operation)"
    }

    /// Sends one operation, retrying what may succeed later, and decodes its answer.
    func send<Response: Decodable>(
        _ type: Response.Type, operation: String, method: HTTPMethod, scope: Scope = .database,
        body: JSONValue?, logger: Logger?
    ) async throws -> Response {
        try await send(operation: operation, method: method, scope: scope, body: body, logger: logger) { bytes in
            if let readable = Response.self as? any JSONReadable.Type {
                // The body is kept, for the records read from it to keep their fields as its JSON.
                var reader = bytes.reader()
                return try readable.init(reading: &reader) as! Response
            }
            return try JSONDecoder().decode(Response.self, from: Data(bytes.buffer))
        }
    }

    /// Sends one operation, retrying what may succeed later, and makes its answer with `decode`;
    /// a body `decode` refuses counts as malformed, and is retried like one.
    func send<Response>(
        operation: String, method: HTTPMethod, scope: Scope = .database,
        body: JSONValue?, logger: Logger?, decode: (JSONBytes) throws -> Response
    ) async throws -> Response {
        var logger = logger ?? self.logger
        logger[metadataKey: "cloudkit.operation"] = "\(operation)"
        let path = path(for: operation, scope: scope)
        let bodyBytes: [UInt8]
        if let body {
            var writer = JSONWriter()
            writer.write(body)
            bodyBytes = writer.bytes
        } else {
            bodyBytes = []
        }

        return try await sendWithRetries(
            operation: operation, method: method, path: path, body: body == nil ? nil : bodyBytes, logger: logger, decode: decode)
    }
}
