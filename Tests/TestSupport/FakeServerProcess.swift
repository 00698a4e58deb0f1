import AsyncHTTPClient
import CloudKitModel
import Foundation
import NIOCore

/// `zonefeed fake-server` as a separate process on a free loopback port, with its admin API.
public final class FakeServerProcess: @unchecked Sendable {
    public let url: String
    let running: ZonefeedBinary.Running

    /// As strict as CloudKit may be: only the newest two web auth tokens are accepted (Apple
    /// documents one; the configured token is retired once a rotated one is used), and every
    /// answer comes after 10 to 30 ms, so that requests overlap and come back out of order.
    public static let strict = ["--token-window", "2", "--latency", "20,10"]

    /// Starts the server with the generator's settings and `options` (strict unless told) and
    /// waits for its ready line.
    public init(
        _ zonefeed: ZonefeedBinary, seed: UInt64, zones: Int, recordsPerZone: Int, options: [String] = FakeServerProcess.strict
    ) async throws {
        running = try zonefeed.start(
            [
                "fake-server", "--port", "0", "--seed", "\(seed)", "--zones", "\(zones)", "--records-per-zone", "\(recordsPerZone)",
            ] + options)
        var found: String?
        for _ in 0..<600 where found == nil {
            let out = (try? String(contentsOf: running.out, encoding: .utf8)) ?? ""
            if let range = out.range(of: "listening on "), let end = out[range.upperBound...].firstIndex(of: " ") {
                found = String(out[range.upperBound..<end])
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
    }

    /// Stops the server without waiting for it to end (a `defer` cannot wait).
    public func stop() {
        running.end()
    }

    /// POST /admin/<path> with a JSON body; returns the response body.
    @discardableResult
    public func admin(_ path: String, _ body: [String: Any] = [:]) async throws -> String {
        var request = HTTPClientRequest(url: "\(url)/admin/\(path)")
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: body)))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let bytes = try await response.body.collect(upTo: 16 << 20)
        let text = String(buffer: bytes)
        guard (200..<300).contains(response.status.code) else {
            throw FakeServerError(message: "admin \(path) answered \(response.status.code): \(text)")
        }
        return text
    }

    /// `GET /admin/state`'s `traffic`: how the CloudKit requests overlapped since `stats/reset`.
    public func traffic() async throws -> [String: Int] {
        let text = try await admin("state")
        let state = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
        return (state?["traffic"] as? [String: Any] ?? [:]).compactMapValues { ($0 as? NSNumber)?.intValue }
    }

    /// Records in CloudKit's wire form, for `records/add`.
    public static func wire(_ records: [Record]) throws -> [Any] {
        try records.map { try JSONSerialization.jsonObject(with: JSONEncoder().encode(RecordEntry.record($0))) }
    }
}

public struct FakeServerError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}
