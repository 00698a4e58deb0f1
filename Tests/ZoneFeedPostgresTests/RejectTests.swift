import FakeCloudKit
import TestSupport
import Testing
import ZoneFeed

@Suite struct RejectTests {
    @Test func nulBytesAndWrongTypedValuesGoToTheRejectsTableAndTheRestApplies() async throws {
        let p = try await FakePipeline(prefix: "rejects", fake: FakeSettings(seed: 21, zones: 2, recordsPerZone: 2_000, badRecordEvery: 7))
        let summary = try await p.run()
        let expected = p.expected()
        let snapshot = try await DestinationSnapshot.read(p)

        #expect(summary.status == .succeeded)
        #expect(expected.rejects > 0)
        #expect(snapshot.rejects.count == expected.rejects)
        #expect(snapshot.rejects.contains { $0.error.contains("NUL") && $0.error.contains("title") })
        #expect(snapshot.rejects.contains { $0.error.contains("wordCount") && $0.error.contains("STRING") && $0.error.contains("bigint") })
        #expect(snapshot.rejects.allSatisfy { $0.raw?.contains("\"recordName\"") == true }, "the entry is kept as received")
        #expect(snapshot.differences(from: expected) == [])
    }

    @Test func onBadRecordFailStopsTheZoneWithoutApplyingItsBatch() async throws {
        var p = try await FakePipeline(prefix: "badfail", fake: FakeSettings(seed: 21, zones: 1, recordsPerZone: 1_000, badRecordEvery: 5))
        p.onBadRecord = "fail"
        p.commitEvery = 100_000
        let summary = try await p.run()
        #expect(summary.status == .failed)
        #expect(summary.zonesFailed.count == 1)
        #expect(summary.zonesFailed.first?.1.contains("onBadRecord") == true)
        let snapshot = try await DestinationSnapshot.read(p)
        #expect(snapshot.rows.isEmpty, "the whole batch was rolled back")
        #expect(snapshot.runStatuses == ["failed"])
    }
}
