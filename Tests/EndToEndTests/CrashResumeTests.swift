import FakeCloudKit
import Foundation
import LibPQ
import TestSupport
import Testing
import ZoneFeed

@Suite(.onItsOwnThread) struct CrashResumeTests {
    /// The process is killed with SIGKILL at random moments of a backfill, several times, then
    /// run to the end: the tables equal the expected state and no page was applied twice. With
    /// one zone, its batches are written two at a time, on both of the destination's sessions
    /// (`BatchesInFlight`): the test sees the zone's claim on one session and a batch's lock on
    /// the other at one moment, so that a kill may find two transactions of the zone open.
    @Test(arguments: [3, 1]) func killedAtRandomPointsThenResumedAppliesEveryPageExactlyOnce(zones: Int) async throws {
        var p = try await FakePipeline(
            prefix: "crash", fake: FakeSettings(seed: 31, zones: zones, recordsPerZone: zones == 1 ? 24_000 : 16_000, badRecordEvery: 11))
        p.commitEvery = 400
        let zonefeed = try ZonefeedBinary(environment: p.environment)
        defer { zonefeed.remove() }
        let file = try p.write(to: zonefeed.directory)

        // Each kill lands at a random moment after the run has committed something new, so it
        // falls in the middle of the backfill however loaded the machine is; a run that ends
        // before its kill (the machine was slow to see its progress) is followed by another,
        // until five were killed or the backfill is done.
        var kills = 0
        var applied = 0
        var mostSessions = 0
        for _ in 0..<8 where kills < 5 {
            let running = try await zonefeed.start(["run", file, "--progress", "never"])
            p.kill(running, afterProgressBeyond: applied, delay: .microseconds(Int.random(in: 0...100_000)))
            let (most, _) = await p.mostZoneHolders(while: [running], until: 2)
            mostSessions = max(mostSessions, most)
            let status = await running.wait().status
            if status == SIGKILL { kills += 1 }
            try await p.waitForSessionsToEnd()
            // What the killed run committed after it was seen: the next run must commit beyond it.
            applied = try await p.recordsApplied()
            if status == 0 { break }  // the backfill is done: nothing is left to kill
        }
        let final = try await zonefeed.run(["run", file, "--progress", "never"])
        #expect(final.status == 0, "\(final.stderr)")
        print("killed \(kills) runs of a backfill of \(p.fake.zones * p.fake.recordsPerZone) records at random moments; final run exit \(final.status)")

        let expected = p.expected()
        let snapshot = try await DestinationSnapshot.read(p)
        #expect(kills >= 3, "runs were killed before they finished")
        // With three zones two claims make two sessions; with one, only the zone's batches do.
        if zones == 1 { #expect(mostSessions >= 2, "the zone's batches were written on both sessions at once") }
        #expect(snapshot.differences(from: expected) == [])
        #expect(snapshot.runPages == expected.pages, "no page applied twice or lost")
        #expect(snapshot.runUpserts == expected.upserts)
        #expect(snapshot.runRejects == expected.rejects)
        #expect(snapshot.rejects.count == expected.rejects)
        #expect(snapshot.tombstonesByReason["deleted"] == expected.tombstones)
        #expect(!snapshot.runStatuses.contains("running"), "killed runs are recorded as failed by the next run")
    }
}
