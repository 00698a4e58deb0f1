import AsyncHTTPClient
import CloudKitModel
import FakeCloudKit
import FakeCloudKitServer
import Foundation
import Logging
import TestSupport

/// A fake server on a free loopback port for one test, and a small client for it.
struct FakeServerHarness: Sendable {
    let port: Int
    let configuration: FakeCloudKitServer.Configuration
    let client: HTTPClient

    static let apiToken = "test-api-token"
    static let initialWebToken = "initial+web/auth=token"

    static func configuration(settings: FakeSettings = FakeSettings(seed: 7, zones: 2, recordsPerZone: 300, pageSize: 50), scenarioFile: String? = nil)
        -> FakeCloudKitServer.Configuration
    {
        FakeCloudKitServer.Configuration(settings: settings, scenarioFile: scenarioFile, apiToken: apiToken, webAuthTokens: [initialWebToken])
    }

    /// Starts the server, runs `body`, stops the server. The server and `body` run on a thread
    /// of their own (`DedicatedExecutor`), as a server in a process of its own would: on the
    /// cooperative pool, which the tests beside it keep busy generating feeds, a request once
    /// waited 20 s. A request's deadline is two minutes: a guard against a hang, not a measure
    /// of speed.
    static func with(
        _ configuration: FakeCloudKitServer.Configuration = configuration(),
        _ body: @Sendable (FakeServerHarness) async throws -> Void
    ) async throws {
        try await withTaskExecutorPreference(DedicatedExecutor(label: "fake-server-harness")) {
            try await serve(configuration, body)
        }
    }

    private static func serve(
        _ configuration: FakeCloudKitServer.Configuration,
        _ body: @Sendable (FakeServerHarness) async throws -> Void
    ) async throws {
        let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
        let logger = {
            var logger = Logger(label: "fake-cloudkit-server-test")
            logger.logLevel = .critical  // cancelling the server logs errors (see `run`)
            return logger
        }()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await FakeCloudKitServer.run(configuration, logger: logger) { listening in continuation.yield(listening.port) }
            }
            var iterator = ports.makeAsyncIterator()
            guard let port = await iterator.next() else { throw HarnessError("the server did not start") }
            // A client of its own, shut down before the server so that no idle connection is
            // left for the server's graceful shutdown to wait for.
            let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup)
            let harness = FakeServerHarness(port: port, configuration: configuration, client: client)
            do {
                try await body(harness)
            } catch {
                try? await client.shutdown()
                group.cancelAll()
                throw error
            }
            try await client.shutdown()
            group.cancelAll()
        }
    }

    struct HarnessError: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    struct Answer: Sendable {
        var status: Int
        var headers: [String: String]
        var bytes: [UInt8]
        var json: JSONValue? { try? JSONDecoder().decode(JSONValue.self, from: Data(bytes)) }
        var rotatedToken: String? { headers["x-apple-cloudkit-web-auth-token"] }
    }

    /// Percent-encodes everything but RFC 3986's unreserved characters, as a client must.
    static func encode(_ text: String) -> String {
        let allowed = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed)!
    }

    func url(database: String, operation: String, webAuthToken: String?, apiToken: String? = apiToken, encodeToken: Bool = true) -> String {
        var url = "http://127.0.0.1:\(port)/database/1/\(configuration.container)/\(configuration.environment)/\(database)/\(operation)"
        var query: [String] = []
        if let apiToken { query.append("ckAPIToken=\(Self.encode(apiToken))") }
        if let webAuthToken { query.append("ckWebAuthToken=\(encodeToken ? Self.encode(webAuthToken) : webAuthToken)") }
        if !query.isEmpty { url += "?" + query.joined(separator: "&") }
        return url
    }

    func send(_ url: String, method: String = "POST", body: JSONValue? = nil, headers extra: [(String, String)] = []) async throws -> Answer {
        try await send(url, method: method, bytes: body.map { Array($0.jsonText.utf8) }, headers: extra)
    }

    /// A request with `bytes` as its body, exactly (nil: none).
    func send(_ url: String, method: String = "POST", bytes: [UInt8]?, headers extra: [(String, String)] = []) async throws -> Answer {
        var request = HTTPClientRequest(url: url)
        request.method = method == "GET" ? .GET : .POST
        if let bytes {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(bytes)
        }
        for (name, value) in extra { request.headers.add(name: name, value: value) }
        let response = try await client.execute(request, timeout: .seconds(120))
        let buffer = try await response.body.collect(upTo: 64 << 20)
        var headers: [String: String] = [:]
        for header in response.headers { headers[header.name.lowercased()] = header.value }
        return Answer(status: Int(response.status.code), headers: headers, bytes: Array(buffer.readableBytesView))
    }

    /// A CloudKit call with the initial web auth token (or the one given).
    func cloudKit(
        _ operation: String, database: String = "private", method: String = "POST", body: JSONValue? = nil,
        webAuthToken: String? = initialWebToken
    ) async throws -> Answer {
        try await send(url(database: database, operation: operation, webAuthToken: webAuthToken), method: method, body: body)
    }

    @discardableResult
    func admin(_ operation: String, _ body: JSONValue = .object([:])) async throws -> JSONValue {
        let answer = try await send("http://127.0.0.1:\(port)/admin/\(operation)", body: body)
        guard answer.status == 200, let json = answer.json else {
            throw HarnessError("admin \(operation) answered \(answer.status): \(String(decoding: answer.bytes, as: UTF8.self))")
        }
        return json
    }

    /// `records/changes` for one zone, from `token`, paging until `moreComing` is false.
    func fetchAll(zone: String, from token: String? = nil, resultsLimit: Int = 200) async throws -> (entries: [JSONValue], token: String, pages: Int) {
        var token = token
        var entries: [JSONValue] = []
        var pages = 0
        while true {
            var body: [String: JSONValue] = ["zoneID": .object(["zoneName": .string(zone)]), "resultsLimit": .int(Int64(resultsLimit))]
            if let token { body["syncToken"] = .string(token) }
            let answer = try await cloudKit("records/changes", body: .object(body))
            guard answer.status == 200, let json = answer.json else {
                throw HarnessError("records/changes answered \(answer.status): \(String(decoding: answer.bytes, as: UTF8.self))")
            }
            pages += 1
            entries += json["records"]?.arrayValue ?? []
            token = json["syncToken"]?.stringValue
            guard json["moreComing"]?.boolValue == true else { break }
            guard pages < 10_000 else { throw HarnessError("records/changes never stops") }
        }
        return (entries, token ?? "", pages)
    }
}

extension JSONValue {
    var arrayValue: [JSONValue]? {
        if case .array(let items) = self { return items }
        return nil
    }

    var boolValue: Bool? {
        if case .bool(let b) = self { return b }
        return nil
    }

    var doubleValue: Double? {
        switch self {
        case .double(let d): return d
        case .int(let i): return Double(i)
        default: return nil
        }
    }

    var objectKeys: Set<String> {
        if case .object(let members) = self { return Set(members.keys) }
        return []
    }
}
