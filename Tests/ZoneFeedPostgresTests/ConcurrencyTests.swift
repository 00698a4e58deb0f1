import FakeCloudKit
import Testing
import TestSupport
import ZoneFeed

@Suite struct ConcurrencyTests {
    @Test func twoRunsAtOnceApplyEachZoneOnce() async throws {
        let p = try FakePipeline(prefix: "twoinproc", fake: FakeSettings(seed: 29, zones: 4, recordsPerZone: 1_500))
        async let a = p.run()
        async let b = p.run()
        let (first, second) = try await (a, b)

        let expected = p.expected()
        let snapshot = try DestinationSnapshot.read(p)
        #expect(snapshot.differences(from: expected) == [])
        #expect(first.totals.pages + second.totals.pages == expected.pages)
        #expect(snapshot.runTombstones == expected.tombstones)
        #expect(snapshot.tombstonesByReason["deleted"] == expected.tombstones)
    }
}
