import CloudKitModel
import FakeCloudKit
import TestSupport
import Testing
import ZoneFeed
import ZoneFeedPostgres

@Suite struct ResyncTests {
    /// After `reset`, the zone is refetched from a nil token under a new generation; rows the
    /// refetch did not bring back are no longer at the source and are tombstoned as `resync`.
    @Test func resyncAfterResetTombstonesRowsThatVanishedFromTheSource() async throws {
        var p = try await FakePipeline(prefix: "resync", fake: FakeSettings(seed: 13, zones: 2, recordsPerZone: 3_000))
        try await p.run()
        let before = try await DestinationSnapshot.read(p)

        try await p.reset(all: true)
        p.fake.recordsPerZone = 2_000  // what the source now has
        let summary = try await p.run()

        let expected = p.expected()
        let after = try await DestinationSnapshot.read(p)
        let vanished = before.rows.filter { expected.rows[$0.key] == nil && !$0.value.deleted }
        #expect(!vanished.isEmpty)
        #expect(vanished.keys.allSatisfy { after.rows[$0]?.deleted == true })
        #expect(after.tombstonesByReason["resync"] == summary.totals.swept)
        #expect(summary.totals.swept == vanished.count)
        for (key, row) in expected.rows {
            #expect(after.rows[key]?.changeTag == row.record.recordChangeTag, "\(key.recordName)")
            if !row.deleted { #expect(after.rows[key]?.deleted == false) }
        }
    }

    @Test func aTokenTheSourceNoLongerAcceptsStartsAResyncOnItsOwn() async throws {
        var p = try await FakePipeline(prefix: "expired", fake: FakeSettings(seed: 17, zones: 1, recordsPerZone: 2_400))
        try await p.run()
        p.fake.recordsPerZone = 1_200  // the stored token now points past the end: expired
        let summary = try await p.run()
        #expect(summary.status == .succeeded)
        #expect(summary.totals.swept > 0)
        let again = try await p.run()
        #expect(again.totals.records == 0, "the resync finished and left a current token")
    }

    /// `reset --zone café` resyncs the zone whose name is those bytes, not the one whose `é` is
    /// an `e` and a combining accent: one String to Swift, two zones to CloudKit (both were
    /// reset, a whole refetch of the other).
    @Test func aResetByNameResyncsTheZoneWithThoseBytesOnly() async throws {
        let p = try await FakePipeline(prefix: "resetbytes", fake: FakeSettings(zones: 1))
        let (composed, decomposed) = ("caf\u{E9}", "cafe\u{301}")
        let destination = try p.destination()
        try await destination.prepare()
        for name in [composed, decomposed] { _ = try await destination.zoneCheckpoint(ZoneID(zoneName: name, ownerRecordName: "_fakeOwner")) }
        let outcome = try await destination.reset(zoneNames: [decomposed, "r\u{E9}sum\u{E9}"], all: false)
        await destination.close()
        #expect(outcome.reset.map { Array($0.zoneName.utf8) } == [Array(decomposed.utf8)])
        #expect(outcome.unknown == ["r\u{E9}sum\u{E9}"])
    }

    @Test func resetOfOneZoneLeavesTheOthersAlone() async throws {
        let p = try await FakePipeline(prefix: "resetone", fake: FakeSettings(seed: 19, zones: 2, recordsPerZone: 800))
        try await p.run()
        try await p.reset(zones: ["Zone01"])
        let summary = try await p.run()
        #expect(summary.zonesApplied.map(\.zoneName) == ["Zone01"])
        #expect(summary.totals.swept == 0, "nothing vanished")
        #expect(try await DestinationSnapshot.read(p).differences(from: p.expected()) == [])
    }
}
