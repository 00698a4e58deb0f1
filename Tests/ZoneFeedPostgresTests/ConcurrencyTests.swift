import FakeCloudKit
import TestSupport
import Testing
import ZoneFeed

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
}

/// Two parties meet: the first to arrive waits (ten seconds at most) for the other.
actor Meeting {
    private var arrived: Set<String> = []
    private var waiting: [CheckedContinuation<Void, Never>] = []
    private(set) var met = false

    func arrive(_ party: String) async {
        guard !met, arrived.insert(party).inserted else { return }
        if arrived.count == 2 {
            met = true
            for waiter in waiting { waiter.resume() }
            waiting = []
            return
        }
        // Whichever ends first, the other party or ten seconds, ends the wait; both child tasks
        // are awaited (the sleep is cancelled, then gives up on nobody).
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.waitForTheOther() }
            group.addTask {
                try? await Task.sleep(for: .seconds(10))
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
        for waiter in waiting { waiter.resume() }
        waiting = []
    }
}
