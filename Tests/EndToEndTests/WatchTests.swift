import FakeCloudKit
import Foundation
import TestSupport
import Testing

/// `zonefeed watch` against the strict fake server over loopback, into a real PostgreSQL: what a
/// dashboard fed by it sees.
@Suite struct WatchTests {
    /// Generous bounds: they prove that a change arrives, and by which path (a ten-minute poll
    /// cannot bring it in 30 s); how fast is printed here and measured by the benchmark.
    /// Waits until `condition` holds, checking every 50 ms (an error, such as a table not made
    /// yet, counts as "not yet"); returns how long it took, or nil after `timeout`.
    static func within(_ timeout: Duration, _ condition: () throws -> Bool) async -> Duration? {
        let clock = ContinuousClock()
        let start = clock.now
        while clock.now - start < timeout {
            if (try? condition()) == true { return clock.now - start }
            // A sleep that gives the thread back: other tests' servers run in this process.
            try? await Task.sleep(for: .milliseconds(50))
        }
        return nil
    }

    /// Until the watcher's push token is registered, and the cycle that follows it is over: a
    /// change made from then on is notified (or, dropped, waits for the safety poll).
    static func waitUntilListening(_ s: CloudKitEndToEndTests.Setup) async throws {
        for _ in 0..<200 {
            if try await s.server.admin("state").contains("\"registeredTokens\":1") { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        try await Task.sleep(for: .seconds(1))
    }

    func startWatching(_ s: CloudKitEndToEndTests.Setup, pollInterval: Int) async throws -> ZonefeedBinary.Running {
        // An empty long poll ends after a second, so that the server stops at once at the end.
        try await s.server.admin("notifications", ["courierTimeoutMilliseconds": 1000])
        var z = s.zonefeed
        z.environment.merge(s.p.environment) { _, new in new }
        return try z.start(["watch", s.file, "--poll-interval", "\(pollInterval)"])
    }

    @Test func aWatcherBringsEachChangeWithinSecondsAndStopsCleanlyOnSIGTERM() async throws {
        let s = try await CloudKitEndToEndTests.Setup("watch", fake: FakeSettings(seed: 95, zones: 2, recordsPerZone: 400))
        defer { s.stop() }
        let watching = try await startWatching(s, pollInterval: 600)
        #expect(await Self.within(.seconds(90)) { try s.liveDifferences() == [] } != nil, "caught up: \(watching.stderrSoFar)")
        try await Self.waitUntilListening(s)

        // Without notifications the next poll is ten minutes away: each change arrives by push.
        for name in ["LIVE-1", "LIVE-2"] {
            try await s.addTag(name, to: "Zone02")
            let took = await Self.within(.seconds(30)) { try s.hasRow(name, in: "Zone02") }
            #expect(took != nil, "\(name) arrived: \(watching.stderrSoFar)")
            print("\(name) visible after \(took.map { "\($0)" } ?? "never")")
        }
        #expect(watching.stderrSoFar.contains("trigger=notification"))
        try await s.server.admin("records/delete", ["zone": "Zone02", "recordNames": ["LIVE-1"]])
        #expect(
            await Self.within(.seconds(30)) { try DestinationSnapshot.read(s.p).rows[.init(zoneName: "Zone02", recordName: "LIVE-1")]?.deleted == true } != nil,
            "the deletion arrived as a tombstone")

        watching.signal(SIGTERM)
        let output = watching.wait()
        #expect(output.status == 0, "a requested stop: \(output.stderr)")
        let statuses = try DestinationSnapshot.read(s.p).runStatuses
        #expect(statuses.count >= 4 && statuses.allSatisfy { $0 == "succeeded" || $0 == "interrupted" }, "\(statuses)")
    }

    @Test func withNotificationsDroppedTheSafetyPollStillBringsEveryChange() async throws {
        let s = try await CloudKitEndToEndTests.Setup("watchpoll", fake: FakeSettings(seed: 97, zones: 2, recordsPerZone: 300))
        defer { s.stop() }
        let watching = try await startWatching(s, pollInterval: 2)
        defer {
            watching.signal(SIGTERM)
            _ = watching.wait()
        }
        #expect(await Self.within(.seconds(90)) { try s.liveDifferences() == [] } != nil)
        try await Self.waitUntilListening(s)
        try await s.server.admin("notifications", ["drop": true])
        try await s.addTag("POLLED-1", to: "Zone01")
        #expect(await Self.within(.seconds(30)) { try s.hasRow("POLLED-1", in: "Zone01") } != nil, "\(watching.stderrSoFar)")
        #expect(watching.stderrSoFar.contains("trigger=poll"), "it came with the safety poll")
        #expect(try await s.server.admin("state").contains("\"dropped\":1"), "the notification was dropped indeed")
    }

    @Test func aRefusedCourierGetsNewPushTokensAndChangesStillArrive() async throws {
        let s = try await CloudKitEndToEndTests.Setup("watchcourier", fake: FakeSettings(seed: 99, zones: 2, recordsPerZone: 300))
        defer { s.stop() }
        let watching = try await startWatching(s, pollInterval: 600)
        defer {
            watching.signal(SIGTERM)
            _ = watching.wait()
        }
        #expect(await Self.within(.seconds(90)) { try s.liveDifferences() == [] } != nil)
        #expect(await Self.within(.seconds(30)) { watching.stderrSoFar.contains("subscribed to the zone's changes") } != nil)
        try await s.server.admin("notifications", ["refuseCourier": true])
        #expect(
            await Self.within(.seconds(30)) { watching.stderrSoFar.contains("the web courier failed; getting a new push token") } != nil,
            "\(watching.stderrSoFar)")
        try await s.server.admin("notifications", ["refuseCourier": false])
        try await s.addTag("AFTER-REFUSAL", to: "Zone01")
        #expect(await Self.within(.seconds(30)) { try s.hasRow("AFTER-REFUSAL", in: "Zone01") } != nil, "\(watching.stderrSoFar)")
    }

    /// A zone created while watching has no subscription yet: the safety poll finds it through
    /// the database feed, and from then on it is subscribed to; deleted, its rows are tombstoned
    /// and its subscription removed.
    @Test func aZoneCreatedWhileWatchingIsFoundByThePollThenSubscribedAndForgottenWhenDeleted() async throws {
        let s = try await CloudKitEndToEndTests.Setup("watchzones", fake: FakeSettings(seed: 101, zones: 2, recordsPerZone: 300))
        defer { s.stop() }
        let watching = try await startWatching(s, pollInterval: 2)
        defer {
            watching.signal(SIGTERM)
            _ = watching.wait()
        }
        #expect(await Self.within(.seconds(90)) { try s.liveDifferences() == [] } != nil)
        try await Self.waitUntilListening(s)
        func subscriptions() async throws -> Int? {
            let state = try JSONSerialization.jsonObject(with: Data(try await s.server.admin("state").utf8)) as? [String: Any]
            return ((state?["notifications"] as? [String: Any])?["subscriptions"] as? NSNumber)?.intValue
        }
        #expect(try await subscriptions() == 2)

        try await s.addTag("IN-NEW-ZONE", to: "ZoneNew")  // creates the zone
        #expect(await Self.within(.seconds(30)) { try s.hasRow("IN-NEW-ZONE", in: "ZoneNew") } != nil, "\(watching.stderrSoFar)")
        var subscribed = false
        for _ in 0..<100 where !subscribed {
            subscribed = try await subscriptions() == 3
            if !subscribed { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(subscribed, "the new zone got its subscription: \(watching.stderrSoFar)")

        try await s.server.admin("zones/delete", ["zone": "ZoneNew"])
        #expect(
            await Self.within(.seconds(30)) {
                try DestinationSnapshot.read(s.p).rows[.init(zoneName: "ZoneNew", recordName: "IN-NEW-ZONE")]?.deleted == true
            } != nil, "the deleted zone's rows are tombstoned")
        var forgotten = false
        for _ in 0..<100 where !forgotten {
            forgotten = try await subscriptions() == 2
            if !forgotten { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(forgotten, "the deleted zone's subscription was removed: \(watching.stderrSoFar)")
    }

    /// Two watchers of one pipeline (a Deployment with two replicas): both hear every change,
    /// zones are claimed with PostgreSQL locks, and each change is applied once.
    @Test func twoWatchersOnOnePipelineApplyEachChangeOnce() async throws {
        let s = try await CloudKitEndToEndTests.Setup("watchtwo", fake: FakeSettings(seed: 103, zones: 2, recordsPerZone: 300))
        defer { s.stop() }
        let first = try await startWatching(s, pollInterval: 600)
        let second = try await startWatching(s, pollInterval: 600)
        defer {
            for watcher in [first, second] {
                watcher.signal(SIGTERM)
                _ = watcher.wait()
            }
        }
        #expect(await Self.within(.seconds(90)) { try s.liveDifferences() == [] } != nil)
        for _ in 0..<200 {
            if try await s.server.admin("state").contains("\"registeredTokens\":2") { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        try await Task.sleep(for: .seconds(1))
        let names = (1...6).map { "BOTH-\($0)" }
        for (i, name) in names.enumerated() {
            try await s.addTag(name, to: i % 2 == 0 ? "Zone01" : "Zone02")
            try await Task.sleep(for: .milliseconds(150))
        }
        #expect(
            await Self.within(.seconds(30)) { try names.enumerated().allSatisfy { try s.hasRow($1, in: $0 % 2 == 0 ? "Zone01" : "Zone02") } } != nil)
        try await Task.sleep(for: .seconds(2))  // any late duplicate would have landed by now
        let snapshot = try DestinationSnapshot.read(s.p)
        #expect(snapshot.runUpserts == s.p.expected().liveCount + names.count, "every record upserted once across both watchers' runs")
        #expect(first.stderrSoFar.contains("trigger=notification") || second.stderrSoFar.contains("trigger=notification"))
    }
}
