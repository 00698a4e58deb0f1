import AsyncHTTPClient
@_exported import CloudKitModel
import Foundation
import Logging
import NIOCore
import NIOHTTP1

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
            connections = RenewableHTTPClient(owned: {
                HTTPClient(eventLoopGroupProvider: .singleton, configuration: http, backgroundActivityLogger: logger)
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

    /// Runs `body` with a client that is shut down afterwards, whatever happens.
    public static func withClient<Result: Sendable>(
        configuration: Configuration, httpClient: HTTPClient? = nil, logger: Logger,
        _ body: (CloudKitClient) async throws -> Result
    ) async throws -> Result {
        let client = CloudKitClient(configuration: configuration, httpClient: httpClient, logger: logger)
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
                return try bytes.withUnsafeBytes { raw in
                    var reader = JSONReader(raw.bindMemory(to: UInt8.self))
                    return try readable.init(reading: &reader) as! Response
                }
            }
            return try JSONDecoder().decode(Response.self, from: bytes)
        }
    }

    /// Sends one operation, retrying what may succeed later, and makes its answer with `decode`;
    /// a body `decode` refuses counts as malformed, and is retried like one.
    func send<Response>(
        operation: String, method: HTTPMethod, scope: Scope = .database,
        body: JSONValue?, logger: Logger?, decode: (Data) throws -> Response
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

    /// Sends one request until it succeeds, fails for good, or runs out of attempts or budget.
    /// Each attempt takes its own slot from the limiter, so that a request waiting to retry does
    /// not hold back the others.
    private func sendWithRetries<Response>(
        operation: String, method: HTTPMethod, path: String, body: [UInt8]?, logger: Logger, decode: (Data) throws -> Response
    ) async throws -> Response {
        let policy = configuration.retry
        let start = ContinuousClock.now
        var attempt = 0
        var tokenRetries = 0
        var misdirections = 0
        while true {
            attempt += 1
            try Task.checkCancellation()
            let ticket = try await limiter.acquire()
            let token: String?
            do {
                token = try await tokens.tokenForRequest(logger: logger)
            } catch {
                _ = await limiter.release(ticket, .failed)
                throw error
            }
            var error: CloudKitError
            let retryAfter: Duration?
            do {
                let answer = try await attemptOnce(operation: operation, method: method, path: path, body: body, token: token, logger: logger)
                Metrics.requests(status: "200").increment()
                // The slot goes back before the answer is decoded: the server counts a request
                // in flight until it has answered, and the limiter learns the server's cap from
                // its own count, which decoding on a loaded machine would inflate.
                let oneAtATime = await limiter.release(ticket, .succeeded)
                // Only a refused token that a newer one then got past says that the server
                // wants one request at a time; a revoked session says nothing of the kind.
                if oneAtATime, tokenRetries > 0 { tokens.learnOneAtATime() }
                do {
                    return try decode(answer.bytes)
                } catch let decoding {
                    error = answer.malformed(decoding)
                    error.attempts = attempt
                    retryAfter = retryDelay(for: error, attempt: attempt, since: start, policy: policy)
                }
            } catch let failure as CloudKitError {
                Metrics.requests(status: failure.httpStatus.map(String.init) ?? "none").increment()
                error = failure
                error.attempts = attempt
                retryAfter = retryDelay(for: error, attempt: attempt, since: start, policy: policy)
                let throttled = error.code == .throttled || error.code == .tryAgainLater
                // A wait this request will not make (it gives up) holds no other request back.
                let pause = retryAfter == nil ? nil : error.retryAfter
                _ = await limiter.release(ticket, throttled ? .throttled(pause: pause) : .failed)
            } catch {
                _ = await limiter.release(ticket, .failed)
                throw error
            }
            // A connection Apple's edge holds for another host: dropped, and the request sent
            // once more on a fresh one, at once. A second 421 on a fresh connection is final.
            if error.code == .misdirected, misdirections == 0 {
                misdirections += 1
                attempt -= 1
                Metrics.misdirectedRetries.increment()
                logger.warning("CloudKit answered 421 Misdirected Request; retrying once on a fresh connection")
                continue
            }
            if error.code == .authenticationFailed, let token, tokenRetries < WebAuthTokenStore.tokensKept,
                await mayRetryWithAnotherToken(after: token, logger: logger)
            {
                tokenRetries += 1
                attempt -= 1
                continue
            }
            guard let retryAfter else {
                if error.isRetryable, attempt < max(policy.maxAttempts, 1) {
                    logger.warning(
                        "giving up: the next attempt would exceed the retry budget",
                        metadata: ["attempt": "\(attempt)", "code": "\(error.code)", "budget": "\(policy.budget.seconds)s"])
                    error.budgetExceeded = true
                }
                throw error
            }
            var metadata: Logger.Metadata = [
                "attempt": "\(attempt)", "maxAttempts": "\(policy.maxAttempts)",
                "delay": "\(String(format: "%.3f", retryAfter.seconds))s", "code": "\(error.code)",
            ]
            if let status = error.httpStatus { metadata["status"] = "\(status)" }
            if let asked = error.retryAfter { metadata["retryAfter"] = "\(asked)s" }
            logger.warning("CloudKit request failed; retrying", metadata: metadata)
            Metrics.retries.increment()
            try await Task.sleep(for: retryAfter)
        }
    }

    /// How long to wait before trying a failed request again; nil when it is not to be tried
    /// again: the failure is final, the attempts are spent, or the wait would not end within
    /// the retry budget (a server asking for an hour is not waited for when the budget is five
    /// minutes: the request fails at once).
    private func retryDelay(for error: CloudKitError, attempt: Int, since start: ContinuousClock.Instant, policy: RetryPolicy) -> Duration? {
        guard error.isRetryable, attempt < max(policy.maxAttempts, 1) else { return nil }
        let delay = policy.delay(afterAttempt: attempt, retryAfter: error.retryAfter)
        guard ContinuousClock.now - start + delay <= policy.budget else { return nil }
        return delay
    }

    /// A request was refused with `AUTHENTICATION_FAILED`. With requests in flight together, its
    /// token may have been overtaken by the others' (a server that accepts only the newest token
    /// or two): requests go one at a time from now on, and once those in flight have answered,
    /// the request is tried again with the newest token known. Returns false when no token is
    /// left to try: a person must sign in again.
    private func mayRetryWithAnotherToken(after refused: String, logger: Logger) async -> Bool {
        if await limiter.becomeOneAtATime() {
            let kept =
                configuration.webAuthTokenFile == nil && configuration.webAuthTokenVault == nil
                ? "" : " (the token file keeps this for later runs once a newer token succeeds)"
            logger.warning(
                "CloudKit refused a web auth token; it may accept only the newest, so requests go one at a time from now on\(kept)")
        }
        await limiter.drain()
        let another = await tokens.refused(refused, logger: logger)
        if another { logger.info("retrying the request with the newest web auth token") }
        return another
    }

    /// One HTTP exchange. Throws `CloudKitError` for every failure except cancellation.
    private func attemptOnce(
        operation: String, method: HTTPMethod, path: String, body: [UInt8]?, token sentToken: String?, logger: Logger
    ) async throws -> Answer {
        var secrets = [configuration.apiToken, configuration.webAuthToken, sentToken].compactMap { $0 }

        var query: [String] = []
        if let apiToken = configuration.apiToken { query.append("ckAPIToken=\(PercentEncoding.encode(apiToken))") }
        if let sentToken { query.append("ckWebAuthToken=\(PercentEncoding.encode(sentToken))") }
        var headers = HTTPHeaders()
        headers.add(name: "Accept", value: "application/json")
        headers.add(name: "User-Agent", value: "zonefeed")
        if body != nil { headers.add(name: "Content-Type", value: "application/json; charset=utf-8") }
        if let signer {
            let signature: RequestSigner.Headers
            do {
                signature = try signer.sign(body: body ?? [], path: path, date: Date())
            } catch {
                throw CloudKitError(
                    code: .signingFailed, reason: "the request could not be signed with the server-to-server key", operation: operation, path: path)
            }
            headers.add(name: "X-Apple-CloudKit-Request-KeyID", value: signature.keyID)
            headers.add(name: "X-Apple-CloudKit-Request-ISO8601Date", value: signature.date)
            headers.add(name: "X-Apple-CloudKit-Request-SignatureV1", value: signature.signature)
        }

        var fault = faults(operation: operation, path: path, secrets: secrets)
        let request: HTTPClient.Request
        do {
            request = try HTTPClient.Request(
                url: origin + path + (query.isEmpty ? "" : "?" + query.joined(separator: "&")), method: method, headers: headers,
                body: body.map { .byteBuffer(ByteBuffer(bytes: $0)) })
        } catch {
            // The URL is made from baseURL and the container: never quote it, it holds the tokens.
            throw fault(.network, "the request's address could not be made from baseURL \(origin)", nil)
        }

        // One deadline for the whole answer, head and body: a server that sends its head at
        // once and then trickles the body is given up on when it passes, not never.
        let limit = configuration.maxResponseBytes
        let collector = ResponseCollector(limit: limit)
        let lease = connections.lease()
        defer { connections.giveBack(lease) }
        // AsyncHTTPClient gets no logger: its trace lines could show the request, tokens and all.
        let task = lease.client.execute(request: request, delegate: collector, deadline: .now() + configuration.timeout.timeAmount)
        let answer: Result<Data, any Error>
        do {
            answer = .success(
                try await withTaskCancellationHandler {
                    try await task.futureResult.get()
                } onCancel: {
                    task.cancel()
                })
        } catch {
            answer = .failure(error)
        }

        // Every response rotates the token, error responses included, and one whose body then
        // failed too.
        let head = collector.head
        if let rotated = head?.headers.first(name: "X-Apple-CloudKit-Web-Auth-Token") {
            tokens.received(rotated, logger: logger)
            secrets.append(rotated)
            fault = faults(operation: operation, path: path, secrets: secrets)
        }
        if head != nil, sentToken != nil { tokens.used() }

        let bytes: Data
        switch answer {
        case .success(let data):
            bytes = data
        case .failure(let error as ResponseCollector.TooLarge):
            throw fault(
                .responseTooLarge, error.announced.map { "the server announced \($0) bytes" } ?? "the body passed \(limit) bytes", head?.status)
        case .failure(let error as HTTPClientError) where error == .deadlineExceeded && head != nil:
            if Task.isCancelled { throw CancellationError() }
            throw fault(.timeout, "the body had not arrived whole by the deadline", head?.status)
        case .failure(let error):
            var failure = try Self.transportFault(error, fault: fault, host: hostDescription)
            failure.httpStatus = head?.status
            if let error = error as? HTTPClientError, error == .connectTimeout, origin.hasPrefix("https://"),
                await TCPProbe.connects(toOrigin: origin, within: Self.connectTimeout(configuration))
            {
                failure = fault(.tlsFailed, "the TLS connection to \(hostDescription) failed: \(TLSFailure.handshakeTimedOut)", nil)
                failure.tlsHost = hostDescription
            }
            throw failure
        }
        let status = head?.status ?? 0
        logger.debug("CloudKit answered", metadata: ["status": "\(status)", "bytes": "\(bytes.count)"])

        guard (200..<300).contains(status) else {
            let errorBody = ServerErrorBody(bytes)
            if status == 421, errorBody.serverErrorCode == nil {
                // Not CloudKit's answer but its edge's: this connection was made for another
                // host. The next request gets a fresh connection, whoever sends it.
                connections.renew(after: lease)
                throw fault(.misdirected, "421 Misdirected Request without CloudKit's error body, from \(hostDescription)", status)
            }
            let code =
                errorBody.serverErrorCode.map { CloudKitError.Code(serverErrorCode: $0) }
                ?? CloudKitError.Code(httpStatus: status) ?? CloudKitError.Code(serverErrorCode: "HTTP_\(status)")
            var error = CloudKitError(
                code: code, httpStatus: status, reason: errorBody.reason.map { Self.scrub($0, secrets: secrets) },
                uuid: errorBody.uuid, redirectURL: errorBody.redirectURL, operation: operation, path: path)
            let headerDelay = head?.headers.first(name: "Retry-After").flatMap(Self.parseRetryAfter)
            // The server's number is taken at most as `maxRetryAfter`, whatever it is (1e300, a
            // date years away): the rest of the client only ever sees a bounded wait.
            if let asked = [errorBody.retryAfter, headerDelay].compactMap({ $0 }).filter({ !$0.isNaN && $0 >= 0 }).max() {
                let most = configuration.maxRetryAfter.seconds
                error.retryAfter = min(asked, most)
                if asked > most { error.retryAfterAsked = asked }
            }
            throw error
        }
        return Answer(bytes: bytes, status: status, fault: fault)
    }

    /// A successful answer, not yet decoded.
    private struct Answer {
        let bytes: Data
        let status: Int
        let fault: @Sendable (CloudKitError.Code, String, Int?) -> CloudKitError

        /// The failure to report when `bytes` do not decode.
        func malformed(_ error: any Error) -> CloudKitError {
            fault(.malformedResponse, CloudKitClient.summary(of: error, byteCount: bytes.count), status)
        }
    }

    /// How a failure of the transport or of the answer becomes a `CloudKitError`, with every
    /// secret scrubbed out of its reason.
    private func faults(operation: String, path: String, secrets: [String]) -> @Sendable (CloudKitError.Code, String, Int?) -> CloudKitError {
        let timeout = configuration.timeout
        let (maxResponseBytes, setting) = (configuration.maxResponseBytes, configuration.maxResponseBytesSetting)
        return { code, reason, status in
            var error = CloudKitError(code: code, httpStatus: status, reason: Self.scrub(reason, secrets: secrets), operation: operation, path: path)
            if code == .timeout { error.limit = "\(String(format: "%g", timeout.seconds)) s for the whole answer" }
            if code == .responseTooLarge { error.limit = "more than \(maxResponseBytes) bytes; the limit is \(setting)" }
            return error
        }
    }

    /// The body, read until `deadline` and up to `limit` bytes. A page is a few hundred
    /// kilobytes: made room for once rather than grown chunk by chunk, and gathered where it is
    /// decoded, with no copy in between. `WebCourier` reads its answers with it too.
    static func readBody(
        of response: HTTPClientResponse, announced: Int?, limit: Int, until deadline: ContinuousClock.Instant, status: Int, host: String,
        fault: @escaping @Sendable (CloudKitError.Code, String, Int?) -> CloudKitError
    ) async throws -> Data {
        let body = response.body
        let read: @Sendable () async throws -> Data = {
            var bytes = Data()
            if let announced, announced > 0 { bytes.reserveCapacity(announced) }
            for try await chunk in body {
                guard bytes.count + chunk.readableBytes <= limit else {
                    throw fault(.responseTooLarge, "the body passed \(limit) bytes", status)
                }
                chunk.withUnsafeReadableBytes { bytes.append(contentsOf: $0) }
            }
            return bytes
        }
        do {
            return try await withThrowingTaskGroup(of: Data?.self) { group in
                group.addTask { try await read() }
                // Cancelling the reader cancels the request, which closes its connection.
                group.addTask {
                    try await Task.sleep(until: deadline)
                    return nil
                }
                defer { group.cancelAll() }
                guard let bytes = try await group.next() ?? nil else {
                    throw fault(.timeout, "the body had not arrived whole by the deadline", status)
                }
                return bytes
            }
        } catch let error as CloudKitError {
            throw error
        } catch {
            throw try transportFault(error, fault: fault, host: host)
        }
    }

    /// `host:port` of `baseURL`, for messages.
    var hostDescription: String { Self.hostDescription(ofOrigin: origin) }

    static func hostDescription(ofOrigin origin: String) -> String {
        guard let schemeEnd = origin.range(of: "://") else { return origin }
        return String(origin[schemeEnd.upperBound...])
    }

    /// A transport error as a `CloudKitError`; cancellation stays a `CancellationError`. A TLS
    /// failure is one of its own, never retried: a certificate that did not verify will not
    /// verify on the next attempt either.
    static func transportFault(
        _ error: any Error, fault: (CloudKitError.Code, String, Int?) -> CloudKitError, host: String
    ) throws -> CloudKitError {
        if error is CancellationError || Task.isCancelled { throw CancellationError() }
        if let cause = TLSFailure.cause(of: error) {
            var failure = fault(.tlsFailed, "the TLS connection to \(host) failed: \(cause)", nil)
            failure.tlsHost = host
            return failure
        }
        if let error = error as? HTTPClientError {
            switch error {
            case .deadlineExceeded, .readTimeout, .connectTimeout, .writeTimeout:
                return fault(.timeout, "\(error)", nil)
            default:
                return fault(.network, "\(error)", nil)
            }
        }
        return fault(.network, String(describing: error), nil)
    }

    // MARK: Helpers

    /// Replaces every secret (raw or percent-encoded) with `<redacted>`.
    static func scrub(_ text: String, secrets: [String]) -> String {
        var text = text
        for secret in secrets where !secret.isEmpty {
            text = text.replacingOccurrences(of: secret, with: "<redacted>")
            text = text.replacingOccurrences(of: PercentEncoding.encode(secret), with: "<redacted>")
        }
        return text
    }

    /// A decoding error in a few words, without the data.
    static func summary(of error: any Error, byteCount: Int) -> String {
        if let failure = error as? JSONReader.Failure {
            return "\(byteCount) bytes that could not be decoded (\(failure.message) at byte \(failure.offset))"
        }
        guard let error = error as? DecodingError else { return "\(byteCount) bytes that could not be decoded" }
        func at(_ path: [any CodingKey]) -> String {
            path.isEmpty ? "" : " at " + path.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
        }
        switch error {
        case .dataCorrupted(let context):
            return context.codingPath.isEmpty ? "\(byteCount) bytes that are not JSON (perhaps cut short)" : "a corrupt value\(at(context.codingPath))"
        case .keyNotFound(let key, let context): return "no \(key.stringValue)\(at(context.codingPath))"
        case .typeMismatch(_, let context), .valueNotFound(_, let context): return "an unexpected value\(at(context.codingPath))"
        @unknown default: return "\(byteCount) bytes that could not be decoded"
        }
    }

    /// `Retry-After: 120` or `Retry-After: Wed, 21 Oct 2015 07:28:00 GMT`, in seconds from now.
    static func parseRetryAfter(_ value: String) -> Double? {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        if let seconds = Double(trimmed), seconds.isFinite, seconds >= 0 { return seconds }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: trimmed) else { return nil }
        return max(0, date.timeIntervalSinceNow)
    }

    static func split(baseURL: String) -> (origin: String, pathPrefix: String) {
        var url = baseURL
        while url.hasSuffix("/") { url.removeLast() }
        guard let schemeEnd = url.range(of: "://") else { return (url, "") }
        let rest = url[schemeEnd.upperBound...]
        guard let slash = rest.firstIndex(of: "/") else { return (url, "") }
        return (String(url[..<slash]), String(url[slash...]))
    }
}
