import AsyncHTTPClient
import Foundation
import NIOCore

/// A Prometheus Pushgateway (prometheus/pushgateway's API): a run's metrics are POSTed to
/// `/metrics/job/<job>/pipeline/<pipeline>` (and `/instance/<instance>` when set). POST replaces only the metrics of the same names in
/// that group, so a failed run, which sends no last-success timestamp, leaves the previous one
/// in place (Prometheus' batch-job pattern, "pushAdd"). swift-prometheus has no Pushgateway
/// client (swift-server/swift-prometheus#47), so the request is made here, with
/// AsyncHTTPClient.
struct Pushgateway {
    let baseURL: String
    let job: String
    let pipeline: String
    var instance: String? = nil

    /// The group's URL, without the user and password the base URL may hold (they travel as
    /// Basic authentication); label values outside `[A-Za-z0-9_.-]` travel base64url-encoded, as
    /// the gateway's API allows (`label@base64/value`).
    var groupURL: String {
        var base = Self.redacted(baseURL)
        while base.hasSuffix("/") { base.removeLast() }
        return base + "/metrics" + Self.pathPart("job", job) + Self.pathPart("pipeline", pipeline) + (instance.map { Self.pathPart("instance", $0) } ?? "")
    }

    static func pathPart(_ label: String, _ value: String) -> String {
        // `.` and `..` are path segments to the gateway, which refused the push (HTTP 400) of
        // `pipeline: ..` or `--metrics-instance .`; encoded, they are plain label values.
        let plain =
            !value.isEmpty && value != "." && value != ".."
            && value.unicodeScalars.allSatisfy { $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "_.-".unicodeScalars.contains($0)) }
        if plain { return "/\(label)/\(value)" }
        let encoded = Data(value.utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-", options: .literal).replacingOccurrences(of: "/", with: "_", options: .literal)
        return "/\(label)@base64/\(encoded.isEmpty ? "=" : encoded)"
    }

    /// How long a push may take until the answer's head, AsyncHTTPClient's timeout; a gateway that
    /// cannot be reached is reported as such then, with the cause.
    static let headTimeLimit: Int64 = 15
    /// How long the answer's body is waited for, after its head. AsyncHTTPClient's timeout ends at
    /// the head: a gateway, or a proxy before it, that sent a head and then its body a byte a second
    /// (or never) held the end of `zonefeed run` for as long, after the run's work was done.
    static let bodyTimeLimit: Duration = .seconds(10)

    func push(_ text: String, httpClient: HTTPClient) async throws {
        var request = HTTPClientRequest(url: groupURL)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "text/plain; version=0.0.4; charset=utf-8")
        // A gateway behind Basic authentication (`--web.config.file`) is named with its user and
        // password in the URL; AsyncHTTPClient sends nothing of a URL's user part by itself, and
        // every push was refused with a 401.
        if let components = URLComponents(string: baseURL), let user = components.user {
            request.setBasicAuth(username: user, password: components.password ?? "")
        }
        request.body = .bytes(ByteBuffer(string: text))
        let response: HTTPClientResponse
        do {
            response = try await httpClient.execute(request, timeout: .seconds(Self.headTimeLimit))
        } catch {
            throw MetricsExportError(.pushgatewayUnreachable, "the Pushgateway at \(Self.redacted(baseURL)) cannot be reached: \(error)")
        }
        // Read for a refusal's reason, and so that the request ends; a 2xx head is the gateway's
        // word that it took the metrics, whatever comes after it.
        let said = await Self.text(of: response.body, within: Self.bodyTimeLimit) ?? ""
        guard (200..<300).contains(Int(response.status.code)) else {
            throw MetricsExportError(
                .pushgatewayRefused,
                "the Pushgateway at \(Self.redacted(baseURL)) refused the metrics: HTTP \(response.status.code)" + (said.isEmpty ? "" : ": \(said)"))
        }
    }

    /// The body's text, trimmed; nil when it is longer than 4 KiB or has not come whole within
    /// `limit`, when the request is cancelled, which ends it at once.
    static func text(of body: HTTPClientResponse.Body, within limit: Duration) async -> String? {
        await withTaskGroup(of: String?.self) { group in
            group.addTask { (try? await body.collect(upTo: 4096)).map { String(buffer: $0).trimmingCharacters(in: .whitespacesAndNewlines) } }
            group.addTask {
                try? await Task.sleep(for: limit)
                return nil
            }
            defer { group.cancelAll() }
            return await group.next() ?? nil
        }
    }

    /// Why a URL cannot be a Pushgateway's; nil when it can.
    static func problem(with url: String) -> String? {
        guard let components = URLComponents(string: url), let scheme = components.scheme, ["http", "https"].contains(scheme.lowercased()),
            components.host?.isEmpty == false
        else {
            return "must be an http:// or https:// URL such as http://pushgateway:9091"
        }
        guard components.query == nil, components.fragment == nil else { return "must not have a query or a fragment" }
        return nil
    }

    /// The URL without a user or password, for messages.
    static func redacted(_ url: String) -> String {
        guard var components = URLComponents(string: url), components.user != nil || components.password != nil else { return url }
        components.user = nil
        components.password = nil
        return components.string ?? "the configured URL"
    }
}
