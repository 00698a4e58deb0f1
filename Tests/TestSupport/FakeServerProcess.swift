import AsyncHTTPClient
import CloudKitModel
import Foundation
import NIOCore
import NIOSSL

/// `zonefeed fake-server` as a separate process on a free loopback port, with its admin API.
public final class FakeServerProcess: Sendable {
    public let url: String
    /// With `--tls`: the CA certificate the server wrote, for `source.cloudkit.tls.caFile`.
    public let caFile: String?
    let running: ZonefeedBinary.Running

    /// `--tls`: HTTPS with a certificate from a CA made at start, offering h2 and http/1.1.
    public static let tls = ["--tls"]

    /// As strict as CloudKit may be: only the newest two web auth tokens are accepted (Apple
    /// documents one; the configured token is retired once a rotated one is used), and every
    /// answer comes after 10 to 30 ms, so that requests overlap and come back out of order.
    public static let strict = ["--token-window", "2", "--latency", "20,10"]

    /// Starts the server with the generator's settings and `options` (strict unless told) and
    /// waits for its ready line.
    public init(
        _ zonefeed: ZonefeedBinary, seed: UInt64, zones: Int, recordsPerZone: Int, options: [String] = FakeServerProcess.strict
    ) async throws {
        running = try await zonefeed.start(
            [
                "fake-server", "--port", "0", "--seed", "\(seed)", "--zones", "\(zones)", "--records-per-zone", "\(recordsPerZone)",
            ] + options)
        var found: String?
        var caFile: String?
        for _ in 0..<600 where found == nil {
            let out = (try? String(contentsOf: running.out, encoding: .utf8)) ?? ""
            if let range = out.range(of: "listening on "), let end = out[range.upperBound...].firstIndex(of: " ") {
                found = String(out[range.upperBound..<end])
                if let ca = out.range(of: "CA certificate in ") {
                    caFile = String(out[ca.upperBound...].prefix { $0 != "\n" })
                }
            } else if !running.isRunning {
                break
            } else {
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        guard let found else {
            let output = await running.stop()
            throw FakeServerError(message: "the fake server did not start: \(output.stderr)")
        }
        url = found
        self.caFile = caFile
    }

    /// TLS that trusts the server's CA, for a client of the test's own.
    public var tlsConfiguration: TLSConfiguration? {
        guard let caFile else { return nil }
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.additionalTrustRoots = [.file(caFile)]
        return configuration
    }

    /// Stops the server (SIGTERM, as a user stops it) without waiting for it to end (a `defer`
    /// cannot wait).
    public func stop() {
        running.end()
    }

    /// Stops the server (SIGTERM) and waits at most `limit` for it to end; a server still
    /// running then is killed, and `timedOut` says so.
    public func stop(within limit: Duration) async -> (status: Int32, timedOut: Bool) {
        running.end()
        let (output, timedOut) = await running.wait(within: limit)
        return (output.status, timedOut)
    }

    /// POST /admin/<path> with a JSON body; returns the response body.
    @discardableResult
    public func admin(_ path: String, _ body: [String: Any] = [:]) async throws -> String {
        var request = HTTPClientRequest(url: "\(url)/admin/\(path)")
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: body)))
        let (status, text) = try await Self.send(request, tls: tlsConfiguration)
        guard (200..<300).contains(status) else {
            throw FakeServerError(message: "admin \(path) answered \(status): \(text)")
        }
        return text
    }

    /// One request, over TLS trusting `tls`'s CA when given (a client made for it and shut down
    /// after), else through the shared client.
    static func send(_ request: HTTPClientRequest, tls: TLSConfiguration?) async throws -> (status: UInt, text: String) {
        guard let tls else {
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
            return (response.status.code, String(buffer: try await response.body.collect(upTo: 16 << 20)))
        }
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(tlsConfiguration: tls))
        do {
            let response = try await client.execute(request, timeout: .seconds(30))
            let text = String(buffer: try await response.body.collect(upTo: 16 << 20))
            try await client.shutdown()
            return (response.status.code, text)
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    /// `GET /admin/state`'s `traffic`: how the CloudKit requests overlapped since `stats/reset`.
    public func traffic() async throws -> [String: Int] { try await counts(in: "traffic") }

    /// `GET /admin/state`'s `notifications`: subscriptions, registered push tokens, and the
    /// notifications queued, delivered and dropped.
    public func notifications() async throws -> [String: Int] { try await counts(in: "notifications") }

    func counts(in block: String) async throws -> [String: Int] {
        let text = try await admin("state")
        let state = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
        return (state?[block] as? [String: Any] ?? [:]).compactMapValues { ($0 as? NSNumber)?.intValue }
    }

    /// Records in CloudKit's wire form, for `records/add`.
    public static func wire(_ records: [Record]) throws -> [Any] {
        try records.map { try JSONSerialization.jsonObject(with: JSONEncoder().encode(RecordEntry.record($0))) }
    }
}

public struct FakeServerError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { message }
    public init(message: String) { self.message = message }
}
