import ArgumentParser
import FakeCloudKitServer
import Foundation
import Logging
import ZoneFeed

struct FakeServerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fake-server",
        abstract: "Serve a fake CloudKit Web Services API on loopback (records/changes, changes/database, zones/list, users/caller).",
        discussion: """
            Serves the fake generator's feed (or a scenario file) with CloudKit's JSON shapes, web \
            auth token rotation and error bodies, plus admin endpoints under /admin/ to add and \
            delete records, delete or purge zones, expire tokens and inject faults. Point a \
            pipeline's baseURL at it (see pipelines/fake-server.yml).
            """)

    @Option(help: "The port on 127.0.0.1 (0 picks a free one; the ready line says which).")
    var port = 8765

    @Option(help: "The generator's seed.")
    var seed: UInt64 = 42

    @Option(help: "How many zones the generator makes.")
    var zones = 3

    @Option(name: .customLong("records-per-zone"), help: "How many entries each zone's history holds.")
    var recordsPerZone = 10_000

    @Option(name: .customLong("page-size"), help: "The generator's page size (1...200): how its history is laid out.")
    var pageSize = 200

    @Flag(name: .customLong("no-churn"), help: "Every entry of the generator's history creates a new record (no updates or deletions).")
    var noChurn = false

    @Flag(name: .customLong("prepare-pages"), help: "Render every zone's pages from a nil token before listening and serve them from memory, so that a backfill measures the client, not the server (zonefeed bench does).")
    var preparePages = false

    @Option(help: "A scenario file to serve instead of the generator.")
    var scenario: String?

    @Option(name: .customLong("api-token"), help: "The API token requests must carry.")
    var apiToken = "fake-api-token"

    @Option(name: .customLong("web-auth-token"), help: "The web auth token accepted at first.")
    var webAuthToken = "fake-web-auth-token"

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel: Logger.Level = .notice

    func run() async throws {
        let level = logLevel
        let logger = Logger(label: "zonefeed.fake-server") { label in ZoneFeedLogHandler(label: label, format: .text, logLevel: level) }
        try await FakeCloudKitServer.runFromCommandLine(
            port: port,
            settings: FakeSettings(seed: seed, zones: zones, recordsPerZone: recordsPerZone, pageSize: pageSize, churn: !noChurn),
            scenario: scenario,
            apiToken: apiToken, webAuthToken: webAuthToken, preparesPages: preparePages, logger: logger)
    }
}
