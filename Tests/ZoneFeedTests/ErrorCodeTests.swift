import AsyncHTTPClient
import FakeCloudKit
import Foundation
import TestSupport
import Testing
import ZoneFeed
import ZoneFeedPostgres

@testable import ZoneFeedMetrics

/// Every error a user can meet carries a code that callers and logs can match, spelled once and
/// for good; the sentence shown stays what it was.
@Suite struct ErrorCodeTests {
    @Test func theCodesAreSpelledAsLogsAndCallersMatchThem() {
        #expect(WatchError.Code.notificationsEnded.description == "notificationsEnded")
        #expect(PipelineComponentError.Code.wrongDestinationType.description == "wrongDestinationType")
        let metrics: [MetricsExportError.Code] = [.fileNotRegular, .fileNotWritten, .pushgatewayUnreachable, .pushgatewayRefused]
        #expect(metrics.map(\.description) == ["fileNotRegular", "fileNotWritten", "pushgatewayUnreachable", "pushgatewayRefused"])
        let watch = WatchError(.notificationsEnded, "the change notifications ended")
        #expect(watch.code == .notificationsEnded)
        #expect(watch.description == "the change notifications ended")
    }

    /// A component handed a pipeline whose destination is of another type.
    @Test func aDestinationOfAnotherTypeIsRefusedWithItsCode() async throws {
        let fake = try await FakePipeline(prefix: "othertype", fake: FakeSettings(seed: 1, zones: 1, recordsPerZone: 1)).pipeline()
        let pipeline = Pipeline(name: "other", source: fake.source, destination: MemoryDestinationSettings(name: "other"))
        let error = try #require(throws: PipelineComponentError.self) { try pipeline.destination(as: PostgresSettings.self) }
        #expect(error.code == .wrongDestinationType)
        #expect(error.description == "pipeline other writes to a destination of type MemoryDestinationSettings, not PostgresSettings")
    }

    @Test func aMetricsFileThatCannotBeWrittenSaysWhyWithACode() throws {
        let folder = NSTemporaryDirectory() + "zonefeed-metrics-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }

        let notAFile = try #require(throws: MetricsExportError.self) { try MetricsFile(path: folder).write("x 1\n") }
        #expect(notAFile.code == .fileNotRegular)
        #expect(notAFile.description.hasPrefix("the metrics file \(folder) exists and is not a regular file"))

        // Its folder is a file: nothing can be written there, whoever runs the test (root too).
        let blocker = folder + "/blocker"
        try "".write(toFile: blocker, atomically: true, encoding: .utf8)
        let unwritable = try #require(throws: MetricsExportError.self) { try MetricsFile(path: blocker + "/zonefeed.prom").write("x 1\n") }
        #expect(unwritable.code == .fileNotWritten)
        #expect(unwritable.description.hasPrefix("the metrics file \(blocker)/zonefeed.prom cannot be written: "))
    }

    @Test func aPushgatewayThatCannotBeReachedOrRefusesSaysWhichWithACode() async throws {
        // The shared client: nothing to shut down on a path that throws (a missing gateway).
        let client = HTTPClient.shared
        let gateway = try await TestPushgateway()
        defer { gateway.stop() }
        let closed = Pushgateway(baseURL: "http://127.0.0.1:9", job: "zonefeed", pipeline: "notes")
        let unreachable = await #expect(throws: MetricsExportError.self) { try await closed.push("x 1\n", httpClient: client) }
        #expect(unreachable?.code == .pushgatewayUnreachable)
        #expect(unreachable?.description.hasPrefix("the Pushgateway at http://127.0.0.1:9 cannot be reached: ") == true)

        let refusing = Pushgateway(baseURL: gateway.url, job: "zonefeed", pipeline: "notes")
        let refused = await #expect(throws: MetricsExportError.self) { try await refusing.push("not { prometheus text\n", httpClient: client) }
        #expect(refused?.code == .pushgatewayRefused)
        #expect(
            refused?.description.hasPrefix("the Pushgateway at \(gateway.url) refused the metrics: HTTP 400") == true, "\(refused.map(\.description) ?? "")")
    }
}
