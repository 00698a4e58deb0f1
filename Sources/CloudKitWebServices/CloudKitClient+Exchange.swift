import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// One exchange with CloudKit: the request as sent (query, headers, signature, the newest web
/// auth token) and its answer as read (size limits, faults mapped to `CloudKitError`, secrets
/// scrubbed from every message).
extension CloudKitClient {
    /// One HTTP exchange. Throws `CloudKitError` for every failure except cancellation.
    func attemptOnce(
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
        let deadline = NIODeadline.now() + configuration.timeout.timeAmount
        // The request is handed to AsyncHTTPClient on an event loop of its own: called from
        // elsewhere, each of its steps (the deadline's timer, the pool's lease of a connection,
        // the connection's idle timer, the request itself) is a task sent to the loop, and each
        // woke the loop's thread. Called there, and with the client on one loop (`CloudKitClient`),
        // they run at once, and the answer comes back on the connection's loop without a hop.
        let loop = lease.client.eventLoopGroup.any()
        let started = StartedRequest()
        let answer = await withTaskCancellationHandler {
            await withCheckedContinuation { (done: CheckedContinuation<Result<JSONBytes, any Error>, Never>) in
                loop.execute {
                    // AsyncHTTPClient gets no logger: its trace lines could show the request, tokens and all.
                    let task = lease.client.execute(request: request, delegate: collector, deadline: deadline)
                    started.start(task)
                    task.futureResult.whenComplete { done.resume(returning: $0) }
                }
            }
        } onCancel: {
            started.cancel()
        }

        // Every response rotates the token, error responses included, and one whose body then
        // failed too.
        let head = collector.head
        if let rotated = head?.headers.first(name: "X-Apple-CloudKit-Web-Auth-Token") {
            tokens.received(rotated, logger: logger)
            secrets.append(rotated)
            fault = faults(operation: operation, path: path, secrets: secrets)
        }
        // A refusal is not a use: it may be the API token's (see `WebAuthTokenStore.refused`).
        if let head, head.status != 401, sentToken != nil { tokens.used() }

        let body: JSONBytes
        switch answer {
        case .success(let gathered):
            body = gathered
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
        logger.debug("CloudKit answered", metadata: ["status": "\(status)", "bytes": "\(body.buffer.count)"])

        guard (200..<300).contains(status) else {
            let errorBody = ServerErrorBody(Data(body.buffer))
            if status == 421, errorBody.serverErrorCode == nil {
                // Not CloudKit's answer but its edge's: this connection was made for another
                // host. The next request gets a fresh connection, whoever sends it.
                connections.renew(after: lease)
                throw fault(.misdirected, "421 Misdirected Request without CloudKit's error body, from \(hostDescription)", status)
            }
            // Every text of the body that a message may quote, scrubbed: a proxy or a server
            // that echoes the request's tokens in its code or uuid must not put them in logs
            // and tables.
            let code =
                errorBody.serverErrorCode.map { CloudKitError.Code(serverErrorCode: Self.scrub($0, secrets: secrets)) }
                ?? CloudKitError.Code(httpStatus: status) ?? CloudKitError.Code(serverErrorCode: "HTTP_\(status)")
            var error = CloudKitError(
                code: code, httpStatus: status, reason: errorBody.reason.map { Self.scrub($0, secrets: secrets) },
                uuid: errorBody.uuid.map { Self.scrub($0, secrets: secrets) }, redirectURL: errorBody.redirectURL, operation: operation,
                path: path)
            error.signedWithServerKey = signer != nil
            error.sentByCloudKit = errorBody.serverErrorCode != nil
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
        return Answer(body: body, status: status, fault: fault, secrets: secrets)
    }

    /// A successful answer, not yet decoded.
    struct Answer {
        let body: JSONBytes
        let status: Int
        let fault: @Sendable (CloudKitError.Code, String, Int?) -> CloudKitError
        /// The request's secrets, and the token its answer rotated to.
        let secrets: [String]

        /// `response` with its error entries scrubbed of `secrets` (`ItemErrorScrubbing`).
        func scrubbed<Response>(_ response: Response) -> Response {
            guard var entries = response as? any ItemErrorScrubbing else { return response }
            entries.scrubItemErrors { CloudKitClient.scrub($0, secrets: secrets) }
            return entries as! Response
        }

        /// The failure to report when `body` does not decode.
        func malformed(_ error: any Error) -> CloudKitError {
            fault(.malformedResponse, CloudKitClient.summary(of: error, byteCount: body.buffer.count), status)
        }
    }

    /// How a failure of the transport or of the answer becomes a `CloudKitError`, with every
    /// secret scrubbed out of its reason.
    func faults(operation: String, path: String, secrets: [String]) -> @Sendable (CloudKitError.Code, String, Int?) -> CloudKitError {
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

    /// A text of the server's (an error's code, reason or uuid) as zonefeed may quote it in
    /// logs, a zone's `last_error`, rejects and `zonefeed status`: every secret (raw or
    /// percent-encoded) replaced with `<redacted>`, and at most `quotedServerTextLength`
    /// characters. An error body may be as large as any answer (32 MiB), and a reason of that
    /// size was written whole into each of those, for every zone it failed.
    static func scrub(_ text: String, secrets: [String]) -> String {
        // Cut first at a length far past the last one, so that megabytes are not searched for
        // every secret. A secret that cut went through is left there in part, at the end, shorter
        // than the longest secret: once the whole ones are redacted, that much of the end goes
        // too (text that is mostly secrets shrinks to within the quoted length).
        var (kept, cut) = prefix(of: text, scalars: 16 * quotedServerTextLength)
        let forms = secrets.filter { !$0.isEmpty }.flatMap { [$0, PercentEncoding.encode($0)] }
        for form in forms { kept = kept.replacingOccurrences(of: form, with: "<redacted>", options: .literal) }
        if cut, let longest = forms.map(\.unicodeScalars.count).max() {
            kept = String(kept.unicodeScalars.dropLast(longest - 1))
        }
        let (quoted, cutAgain) = prefix(of: kept, scalars: quotedServerTextLength)
        return cut || cutAgain ? quoted + "… (cut; \(text.utf8.count) bytes in all)" : quoted
    }

    /// How many characters of a server's text (see `scrub`) are kept; CloudKit's reasons are a
    /// sentence.
    public static let quotedServerTextLength = 1_000

    /// The first `count` Unicode scalars of `text`, and whether there were more.
    private static func prefix(of text: String, scalars count: Int) -> (String, cut: Bool) {
        let scalars = text.unicodeScalars
        guard let end = scalars.index(scalars.startIndex, offsetBy: count, limitedBy: scalars.endIndex), end < scalars.endIndex else {
            return (text, false)
        }
        return (String(scalars[..<end]), true)
    }

    /// A decoding error in a few words, without the data.
    static func summary(of error: any Error, byteCount: Int) -> String {
        if let odd = error as? EntriesOfNoShape { return "\(byteCount) bytes holding \(odd)" }
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
