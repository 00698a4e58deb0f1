import AsyncHTTPClient
import CloudKitModel
import Foundation
import NIOCore

/// The web courier of a push token (field-notes §1.2): each long poll answers one notification
/// and closes, or answers an empty body when nothing came in time (poll again); a notification is
/// never delivered twice. It has an HTTP client of its own: sharing one connection pool with the
/// API host gave 421 Misdirected Request (MistKit). The URL holds the push token, a secret: no
/// message names it.
public final class WebCourier: Sendable {
    let url: String
    let pollTimeout: Duration
    let httpClient: HTTPClient

    /// - Parameter pollTimeout: how long one poll may stay open; the courier answers sooner
    ///   (empty) when nothing comes.
    ///   - trust: the certificate authorities the courier's TLS certificate is verified against.
    public init(url: String, pollTimeout: Duration = .seconds(60), trust: TLSTrust = .system) {
        self.url = url
        self.pollTimeout = pollTimeout
        var configuration = HTTPClient.Configuration(tlsConfiguration: trust.clientConfiguration, redirectConfiguration: .disallow)
        configuration.connectionPool.retryConnectionEstablishment = false
        configuration.timeout = .init(connect: .seconds(10), read: .nanoseconds(Int64(pollTimeout.seconds * 1e9)))
        httpClient = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// One long poll: the notification, or nil when the courier answered with an empty body or
    /// held the poll past `pollTimeout`. Throws `CloudKitError` for an answer that is not 2xx (a
    /// refused or expired push token) and for network faults.
    public func poll() async throws -> JSONValue? {
        let started = ContinuousClock.now
        let response: HTTPClientResponse
        do {
            response = try await httpClient.execute(HTTPClientRequest(url: url), deadline: .now() + .nanoseconds(Int64(pollTimeout.seconds * 1e9)))
        } catch let error as HTTPClientError where error == .deadlineExceeded || error == .readTimeout {
            // How long the courier holds a poll is not documented: one held longer than ours is
            // an empty answer, not a failure (it must not cost the push token).
            return nil
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            // The URL holds the push token: only its host is named.
            let host = CloudKitClient.hostOnly(of: url)
            if let cause = TLSFailure.cause(of: error) {
                var failure = CloudKitError(code: .tlsFailed, reason: "the TLS connection to the web courier \(host) failed: \(cause)", operation: "courier")
                failure.tlsHost = host
                throw failure
            }
            throw CloudKitError(code: .network, reason: "the web courier cannot be reached", operation: "courier")
        }
        let status = Int(response.status.code)
        // The answer is read whole by twice the poll's time from its start and up to 1 MiB: a
        // body that trickles a byte at a time would otherwise hold the notifications for good.
        let body = try await CloudKitClient.readBody(
            of: response, announced: nil, limit: 1 << 20, until: started + pollTimeout * 2, status: status,
            host: CloudKitClient.hostOnly(of: url)
        ) { code, reason, status in
            CloudKitError(code: code, httpStatus: status, reason: "the web courier's answer was not read whole: \(reason)", operation: "courier")
        }
        guard (200..<300).contains(status) else {
            throw CloudKitError(
                code: status == 401 ? .authenticationFailed : .network, httpStatus: status,
                reason: "the web courier refused the push token (HTTP \(status))", operation: "courier")
        }
        guard !body.isEmpty else { return nil }
        // Whatever the notification says, it says that something changed: a body that is not
        // JSON still counts.
        return body.withUnsafeBytes { try? JSONValue(parsing: $0) } ?? .object([:])
    }

    public func shutdown() async throws {
        try await httpClient.shutdown()
    }
}
