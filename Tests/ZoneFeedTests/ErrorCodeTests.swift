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

    /// The textfile folder may be writable by others. A link planted at the name the file was
    /// written under before its rename (made of the pid) had the metrics written, and mode 0644
    /// set, on whatever file it pointed at: a secret of the user running zonefeed, say.
    @Test func aLinkPlantedBesideTheMetricsFileIsNotWrittenThrough() throws {
        let folder = NSTemporaryDirectory() + "zonefeed-metrics-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let secret = folder + "/secret"
        try "secret\n".write(toFile: secret, atomically: true, encoding: .utf8)
        #expect(chmod(secret, 0o600) == 0)
        try FileManager.default.createSymbolicLink(atPath: folder + "/.zonefeed.prom.\(getpid()).tmp", withDestinationPath: secret)

        try MetricsFile(path: folder + "/zonefeed.prom").write("x 1\n")
        #expect(try String(contentsOfFile: folder + "/zonefeed.prom", encoding: .utf8) == "x 1\n")
        #expect(try String(contentsOfFile: secret, encoding: .utf8) == "secret\n", "the file the link points at is untouched")
        #expect((try FileManager.default.attributesOfItem(atPath: secret)[.posixPermissions] as? Int) == 0o600)
        let left = try FileManager.default.contentsOfDirectory(atPath: folder).filter { $0.hasSuffix(".tmp") && !$0.contains("\(getpid())") }
        #expect(left.isEmpty, "no temporary file is left: \(left)")
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
