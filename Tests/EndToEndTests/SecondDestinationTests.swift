import CloudKitModel
import FakeCloudKit
import Foundation
import Synchronization
import TestSupport
import Testing
import ZoneFeed
import ZoneFeedCommandLine
import ZoneFeedComponents

/// A destination registered only here, the in-memory one behind `destination: { memory: NAME }`:
/// `run`, `status` and `reset` reach it through the same command code as PostgreSQL, and neither
/// the engine nor the command line knows of it.
@Suite struct SecondDestinationTests {
    static let components = PipelineComponents(
        sources: PipelineComponents.zonefeed.sources, destinations: PipelineComponents.zonefeed.destinations + [MemoryDestinationSettings.self],
        sections: PipelineComponents.zonefeed.sections)

    /// `zonefeed <arguments>` in this process with these components: its exit code and what it
    /// printed for the person.
    static func zonefeed(_ arguments: [String]) async -> (code: Int32, output: String) {
        let printed = Printed()
        let code = await ZoneFeedCommand.$components.withValue(components) {
            await ZoneFeedCommand.$output.withValue({ line in printed.lines.withLock { $0.append(line) } }) {
                await ZoneFeedCommand.run(arguments: arguments)
            }
        }
        return (code, printed.lines.withLock { $0.joined(separator: "\n") })
    }

    /// What a command printed, line by line.
    final class Printed: Sendable {
        let lines = Mutex<[String]>([])
    }

    /// The live record names of each zone the store holds.
    static func liveRows(_ store: MemoryDestination, zones: [String]) async -> [String: Set<String>] {
        var live: [String: Set<String>] = [:]
        for zone in zones { live[zone] = await store.live(ZoneID(zoneName: zone, ownerRecordName: FakeSettings().owner)) }
        return live
    }

    @Test func runStatusAndResetWorkOnADestinationOnlyTheTestsKnow() async throws {
        let store = "second-\(UUID().uuidString.prefix(8))"
        let fake = FakeSettings(seed: 17, zones: 2, recordsPerZone: 300, pageSize: 50)
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("zonefeed-second-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let file = folder.appendingPathComponent("second.yml").path
        try """
        pipeline: second
        source:
          fake:
            seed: \(fake.seed)
            zones: \(fake.zones)
            recordsPerZone: \(fake.recordsPerZone)
            pageSize: \(fake.pageSize)
        destination:
          memory: \(store)
          commitEvery: 100
        """.write(toFile: file, atomically: true, encoding: .utf8)
        let zones = (0..<fake.zones).map(FakeFeed.zoneName)
        // The memory destination keeps every version it is given, fit or not.
        let expected = ExpectedState(settings: fake, isRejected: { _ in false })
        var expectedLive: [String: Set<String>] = [:]
        for (key, row) in expected.rows where !row.deleted { expectedLive[key.zoneName, default: []].insert(key.recordName) }
        let memory = MemoryDestinationSettings.store(named: store)

        let first = await Self.zonefeed(["run", file, "--progress", "never", "--log-level", "error"])
        #expect(first.code == 0, "\(first.output)")
        #expect(first.output.hasPrefix("zonefeed second: run 1 succeeded"), "\(first.output)")
        #expect(first.output.contains("\(expected.upserts.grouped) upserted, \(expected.tombstones.grouped) tombstoned"), "\(first.output)")
        #expect(await Self.liveRows(memory, zones: zones) == expectedLive, "the run wrote the source's live records")

        let status = await Self.zonefeed(["status", file])
        #expect(status.code == 0, "\(status.output)")
        let lines = status.output.split(separator: "\n").map(String.init)
        #expect(lines.first == "pipeline second (memory \(store))", "\(status.output)")
        for zone in zones {
            let row = lines.first { $0.hasPrefix(zone + " ") } ?? ""
            #expect(row.contains(" \(expectedLive[zone]!.count.grouped) "), "\(zone)'s live rows are shown: \(status.output)")
        }
        #expect(lines.contains { $0.hasPrefix("1 ") && $0.contains("succeeded") }, "the run is listed: \(status.output)")

        let reset = await Self.zonefeed(["reset", file, "--zone", zones[0]])
        #expect(reset.code == 0, "\(reset.output)")
        #expect(reset.output == "zone \(zones[0]): will resync from the beginning on the next run")
        let marked = await memory.checkpoints[ZoneID(zoneName: zones[0], ownerRecordName: fake.owner)]
        #expect(marked?.resyncing == true && marked?.generation == 2 && marked?.token == nil, "\(String(describing: marked))")
        let unknown = await Self.zonefeed(["reset", file, "--zone", "NoSuchZone"])
        #expect(unknown.code == 2, "a zone with no checkpoint is a usage error, as with PostgreSQL")

        let second = await Self.zonefeed(["run", file, "--progress", "never", "--log-level", "error"])
        #expect(second.code == 0, "\(second.output)")
        #expect(second.output.hasPrefix("zonefeed second: run 2 succeeded"), "the reset zone was fetched again: \(second.output)")
        let resynced = await memory.checkpoints[ZoneID(zoneName: zones[0], ownerRecordName: fake.owner)]
        #expect(resynced?.resyncing == false && resynced?.generation == 2 && resynced?.token != nil, "\(String(describing: resynced))")
        #expect(await Self.liveRows(memory, zones: zones) == expectedLive, "the resync left the same live records")
    }
}
