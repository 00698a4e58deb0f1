import CloudKitWebServices
import Foundation
import Logging
import NIOConcurrencyHelpers
import Testing
import ZoneFeed
import ZoneFeedCloudKit

/// Secrets the tests use; none of them may ever appear in a log line or an error's text. They
/// hold `+`, `/` and `=` on purpose.
enum Secrets {
    static let apiToken = "api+Token/With=Specials"
    static let webAuthToken = "web+Auth/Token==one"
    static let rotatedToken = "rotated+Token/two=="
    static let newestToken = "newest+Token/three="
    static let all = [apiToken, webAuthToken, rotatedToken, newestToken]

    static func leaked(in text: String) -> [String] {
        all.filter { text.contains($0) || text.contains(strictlyEncoded($0)) }
    }

    static func strictlyEncoded(_ s: String) -> String {
        s.replacingOccurrences(of: "+", with: "%2B").replacingOccurrences(of: "/", with: "%2F").replacingOccurrences(of: "=", with: "%3D")
    }
}

/// Keeps every log line, metadata included, so a test can check what was said and that no secret
/// was.
final class LogRecorder: Sendable {
    let lines = NIOLockedValueBox<[String]>([])

    var logger: Logger {
        var logger = Logger(label: "test") { _ in Handler(recorder: self) }
        logger.logLevel = .trace
        return logger
    }

    var text: String { lines.withLockedValue { $0.joined(separator: "\n") } }

    struct Handler: LogHandler {
        let recorder: LogRecorder
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let all = metadata.merging(event.metadata ?? [:]) { $1 }
            let line = "\(event.level) \(event.message) " + all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            recorder.lines.withLockedValue { $0.append(line) }
        }
    }
}

/// A client pointed at a canned server, with the test's secrets and fast retries.
func makeClient(
    _ server: CannedServer, logs: LogRecorder = LogRecorder(),
    configure: (inout CloudKitClient.Configuration) -> Void = { _ in }
) -> CloudKitClient {
    var configuration = CloudKitClient.Configuration(
        container: "iCloud.com.example.notes", environment: .development, database: .private, baseURL: server.baseURL)
    configuration.apiToken = Secrets.apiToken
    configuration.webAuthToken = Secrets.webAuthToken
    // Generous limits: with every suite running at once on a loaded two-core CI machine, a test's
    // task can wait tens of seconds for a thread, and these tests do not check the limits (the
    // tests that do set their own).
    configuration.timeout = .seconds(60)
    configuration.retry = RetryPolicy(maxAttempts: 4, budget: .seconds(120), baseDelay: .milliseconds(10), maxDelay: .milliseconds(50), jitter: false)
    configure(&configuration)
    return CloudKitClient(configuration: configuration, logger: logs.logger)
}

/// Runs `body` with a started server and a client, and shuts both down on every path.
func withServer<T: Sendable>(
    logs: LogRecorder = LogRecorder(),
    configure: (inout CloudKitClient.Configuration) -> Void = { _ in },
    _ body: (CannedServer, CloudKitClient) async throws -> T
) async throws -> T {
    let server = try await CannedServer.start()
    let client = makeClient(server, logs: logs, configure: configure)
    do {
        let result = try await body(server, client)
        try await client.shutdown()
        try await server.stop()
        return result
    } catch {
        try? await client.shutdown()
        try? await server.stop()
        throw error
    }
}

/// A `CloudKitSource` on a canned server, reading the record types `recordTypes` (the public
/// database's) with the settings `configure` leaves; the source and the server are shut down
/// however `body` ends.
func withCannedSource<T: Sendable>(
    recordTypes: [String] = [],
    configure: (inout CloudKitSettings) -> Void,
    _ body: (CannedServer, CloudKitSource) async throws -> T
) async throws -> T {
    let server = try await CannedServer.start()
    var settings = CloudKitSettings(
        container: "iCloud.com.example.notes",
        auth: .init(apiToken: Secret(Secrets.apiToken), webAuthToken: Secret(Secrets.webAuthToken)))
    settings.baseURL = server.baseURL
    settings.timeoutSeconds = 10
    configure(&settings)
    var source: CloudKitSource
    do {
        source = try CloudKitSource(settings: settings, logger: LogRecorder().logger)
    } catch {
        try? await server.stop()
        throw error
    }
    source.recordTypes = recordTypes
    do {
        let result = try await body(server, source)
        try await source.shutdown()
        try await server.stop()
        return result
    } catch {
        try? await source.shutdown()
        try? await server.stop()
        throw error
    }
}

/// Polls `condition` for up to a minute; records an issue if it never holds.
func waitUntil(_ condition: () -> Bool) async throws {
    let deadline = ContinuousClock.now + .seconds(60)
    while !condition() {
        guard ContinuousClock.now < deadline else {
            Issue.record("the condition did not hold within a minute")
            return
        }
        try await Task.sleep(for: .milliseconds(10))
    }
}

/// A sparse file of `bytes` at `path`, mode 0600: a file far too large to read, costing no disk.
func makeSparseFile(_ path: String, bytes: Int) {
    let fd = open(path, O_CREAT | O_WRONLY, 0o600)
    #expect(fd >= 0 && ftruncate(fd, off_t(bytes)) == 0)
    close(fd)
}

/// A fresh folder under the temporary directory, removed by the caller.
func temporaryFolder() throws -> String {
    let path = NSTemporaryDirectory() + "zonefeed-ck-\(UUID().uuidString)"
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

let emptyPage = #"{"records":[],"syncToken":"zone-token-1","moreComing":false}"#
