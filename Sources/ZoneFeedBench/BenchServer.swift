import AsyncHTTPClient
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOSSL

/// A `zonefeed fake-server` the bench started: where it listens, the CA certificate to trust
/// over TLS, and its admin counters.
struct BenchServer: Sendable {
    var baseURL: String
    /// With `--tls`: the CA certificate file the server wrote.
    var caFile: String?

    /// `POST /admin/stats/reset`: the traffic counts start again from zero.
    func resetTraffic() async throws {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let caFile { tls.additionalTrustRoots = [.file(caFile)] }
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(tlsConfiguration: tls))
        do {
            var request = HTTPClientRequest(url: "\(baseURL)/admin/stats/reset")
            request.method = .POST
            request.body = .bytes(ByteBuffer(string: "{}"))
            _ = try await client.execute(request, timeout: .seconds(30))
            try await client.shutdown()
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    /// One number of `GET /admin/state`'s `traffic` (`connections`, `peakInFlight`, …).
    func trafficCount(_ name: String) async throws -> Int {
        ((try await state()["traffic"] as? [String: Any])?[name] as? NSNumber)?.intValue ?? 0
    }

    /// One number at the top of `GET /admin/state` (`preparedPages`, `preparedPagesServed`, …).
    func count(_ name: String) async throws -> Int {
        (try await state()[name] as? NSNumber)?.intValue ?? 0
    }

    /// `GET /admin/state`.
    private func state() async throws -> [String: Any] {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let caFile { tls.additionalTrustRoots = [.file(caFile)] }
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(tlsConfiguration: tls))
        do {
            let response = try await client.execute(HTTPClientRequest(url: "\(baseURL)/admin/state"), timeout: .seconds(30))
            let body = try await response.body.collect(upTo: 16 << 20)
            try await client.shutdown()
            return try JSONSerialization.jsonObject(with: Data(buffer: body)) as? [String: Any] ?? [:]
        } catch {
            try? await client.shutdown()
            throw error
        }
    }
}
