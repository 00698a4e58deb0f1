import CloudKitModel
import FakeCloudKit
import LibPQ
import Logging
import TestSupport
import Testing
import ZoneFeed
import ZoneFeedPostgres

@Suite struct ConcurrencyTests {
    @Test func twoRunsAtOnceApplyEachZoneOnce() async throws {
        let p = try await FakePipeline(prefix: "twoinproc", fake: FakeSettings(seed: 29, zones: 4, recordsPerZone: 1_500))
        // Each run, once it holds its first zone, waits for the other to hold one too: the runs
        // provably overlap, each holding zones the other may not take.
        let meeting = Meeting()
        async let a = p.run { event in if case .willFetchRecordZoneChanges = event { await meeting.arrive("a") } }
        async let b = p.run { event in if case .willFetchRecordZoneChanges = event { await meeting.arrive("b") } }
        let (first, second) = try await (a, b)
        #expect(await meeting.met, "both runs held a zone at the same moment")

        let expected = p.expected()
        let snapshot = try await DestinationSnapshot.read(p)
        #expect(snapshot.differences(from: expected) == [])
        #expect(first.totals.pages + second.totals.pages == expected.pages)
        #expect(snapshot.runTombstones == expected.tombstones)
        #expect(snapshot.tombstonesByReason["deleted"] == expected.tombstones)
    }

    /// Two zones whose names PostgreSQL's 32-bit `hashtext` gives one value (found among 300,000
    /// names), claimed by two processes of one pipeline. Claimed by a 32-bit hash of the zone
    /// beside the pipeline's, they were one lock: the second was taken for claimed elsewhere,
    /// and skipped in every run that met the first held. Each claim still keeps its own zone
    /// from another process until it is released.
    @Test func zonesWhoseNamesCollideIn32BitsAreClaimedApart() async throws {
        let p = try await FakePipeline(prefix: "claimhash", fake: FakeSettings(seed: 31, zones: 1, recordsPerZone: 1))
        let owner = "_fakeOwner"
        let pair = try await Connection.withConnectionOffPool(p.url) { c in
            try c.query(
                """
                SELECT min(n), max(n) FROM (SELECT 'Zone-' || i AS n FROM generate_series(1, 300000) i) names
                GROUP BY hashtext($1 || '/' || n) HAVING count(*) > 1 LIMIT 1
                """, [owner]
            ).rows.first.map { (try $0.decode(0, as: String.self), try $0.decode(1, as: String.self)) }
        }
        let (a, b) = try #require(pair, "two of 300,000 names share a 32-bit hash (about ten pairs are expected)")
        let (x, y) = (ZoneID(zoneName: a, ownerRecordName: owner), ZoneID(zoneName: b, ownerRecordName: owner))
        let logger = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
        let one = try PostgresDestination(pipeline: p.pipeline(), conninfo: p.url, logger: logger)
        let other = try PostgresDestination(pipeline: p.pipeline(), conninfo: p.url, logger: logger)
        try await one.prepare()
        try await other.prepare()
        #expect(try await one.claimZone(x))
        #expect(try await other.claimZone(y), "\(b) is not \(a): the other process claims it")
        #expect(try await !other.claimZone(x), "\(a) is held by the first process")
        try await one.releaseZone(x)
        try await other.releaseZone(y)
        #expect(try await other.claimZone(x), "released, \(a) is free")
        try await other.releaseZone(x)
        await one.close()
        await other.close()
    }
}

/// Two parties meet: the first to arrive waits (ten seconds at most) for the other. They met
/// only if the second came while the first still waited: one that came after the first gave up
/// proves no overlap.
actor Meeting {
    private var arrived: Set<String> = []
    private var waiting: [CheckedContinuation<Void, Never>] = []
    private var gaveUp = false
    private(set) var met = false

    func arrive(_ party: String) async {
        guard !met, arrived.insert(party).inserted else { return }
        if arrived.count == 2 {
            met = !gaveUp
            for waiter in waiting { waiter.resume() }
            waiting = []
            return
        }
        // Whichever ends first, the other party or two minutes, ends the wait; both child tasks
        // are awaited (the sleep is cancelled, then gives up on nobody). Alone the test takes 2 s;
        // in the full suite, where the two cores serve every other test too, 166-212 s, and ten
        // seconds' wait for the second run to hold a zone once ran out (a sitting's fourth run).
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.waitForTheOther() }
            group.addTask {
                try? await Task.sleep(for: .seconds(120))
                await self.giveUp()
            }
            await group.next()
            group.cancelAll()
        }
    }

    private func waitForTheOther() async {
        guard !met else { return }
        await withCheckedContinuation { waiting.append($0) }
    }

    private func giveUp() {
        // Called too when the sleep is cancelled because the other party came.
        if !met { gaveUp = true }
        for waiter in waiting { waiter.resume() }
        waiting = []
    }
}
