import AsyncHTTPClient
import CloudKitModel
import FakeCloudKit
import Foundation
import LibPQ
import TestSupport
import Testing

/// `zonefeed watch` against the strict fake server over loopback, into a real PostgreSQL: what a
/// dashboard fed by it sees.
@Suite(.onItsOwnThread) struct WatchTests {
    /// Generous bounds: they prove that a change arrives, and by which path (a ten-minute poll
    /// cannot bring it in 30 s); how fast is printed here and measured by the benchmark.
    /// Waits until `condition` holds, checking every 50 ms (an error, such as a table not made
    /// yet, counts as "not yet"); returns how long it took, or nil after `timeout`.
    static func within(_ timeout: Duration, _ condition: () async throws -> Bool) async -> Duration? {
        let clock = ContinuousClock()
        let start = clock.now
        while clock.now - start < timeout {
            if (try? await condition()) == true { return clock.now - start }
            // A sleep that gives the thread back: other tests' servers run in this process.
            try? await Task.sleep(for: .milliseconds(50))
        }
        return nil
    }

    /// Until the watcher's push token is registered, and the cycle that follows it is over: a
    /// change made from then on is notified (or, dropped, waits for the safety poll).
    static func waitUntilListening(_ s: CloudKitEndToEndTests.Setup) async throws {
        let registered = await within(.seconds(60)) { try await s.server.admin("state").contains("\"registeredTokens\":1") }
        try #require(registered != nil, "the watcher registered a push token within a minute")
        // The cycle the registration starts (a run, like every cycle) has been and gone: on a
        // loaded machine it may come seconds later, and would bring a change made meanwhile.
        let settled = await within(.seconds(60)) {
            let statuses = try await DestinationSnapshot.read(s.p).runStatuses
            return statuses.count >= 2 && !statuses.contains("running")
        }
        try #require(settled != nil, "the cycle after the registration ended within a minute")
    }

    /// The database's clock, for comparing with the run ledger's `started_at`.
    static func databaseNow(_ s: CloudKitEndToEndTests.Setup) throws -> String {
        try Connection.withConnection(s.p.url) { c in try c.query("SELECT clock_timestamp()::text").scalar ?? "" }
    }

    /// What the pipeline's sessions (and any session waiting on a lock) are doing, for a failure's
    /// message: a cycle that never ends shows here as a query waiting on a lock, or not at all
    /// when it waits elsewhere.
    static func sessions(_ s: CloudKitEndToEndTests.Setup) -> String {
        let rows = try? Connection.withConnection(s.p.url) { c in
            try c.query(
                """
                SELECT concat_ws(' ', pid, application_name, state, wait_event_type, wait_event, now() - query_start, left(query, 160))
                FROM pg_stat_activity
                WHERE pid <> pg_backend_pid() AND backend_type = 'client backend' AND (application_name = $1 OR wait_event_type = 'Lock')
                """, ["zonefeed/\(s.p.name)"]
            ).rows.map { $0[0] ?? "" }
        }
        return "sessions:\n" + (rows ?? ["(could not be read)"]).joined(separator: "\n")
    }

    /// The processes that started a run of the pipeline after `time` (from `databaseNow`).
    static func runners(_ s: CloudKitEndToEndTests.Setup, since time: String) throws -> Set<Int32> {
        try Connection.withConnection(s.p.url) { c in
            let rows = try c.query(
                "SELECT DISTINCT pid FROM \(quoteIdentifier(s.p.schema)).zonefeed_runs WHERE pipeline = $1 AND started_at > $2::timestamptz",
                [s.p.name, time]
            ).rows
            return Set(rows.compactMap { $0[0].flatMap { Int32($0) } })
        }
    }

    /// Until the run ledger has not changed for `quiet` and no run is running; how long it took,
    /// or nil after a minute.
    static func runsHoldStill(_ s: CloudKitEndToEndTests.Setup, for quiet: Duration) async -> Duration? {
        var last: [String] = []
        var stillSince = ContinuousClock.now
        return await within(.seconds(60)) {
            let statuses = try await DestinationSnapshot.read(s.p).runStatuses
            if statuses != last || statuses.contains("running") { (last, stillSince) = (statuses, .now) }
            return ContinuousClock.now - stillSince >= quiet
        }
    }

    /// `http://host:port` of the watcher's `/healthz` and `/metrics`, from its log line (text or
    /// JSON; it may listen on port 0, any free port); nil when it has not said within 90 s (a
    /// loaded machine may take half a minute to start the process).
    static func listeningAddress(of watching: ZonefeedBinary.Running) async -> String? {
        var address: String?
        _ = await within(.seconds(90)) {
            let line = watching.stderrSoFar.split(separator: "\n").first { $0.contains("serving /healthz and /metrics") }
            address = line?.components(separatedBy: "address").dropFirst().first
                .map { "http://" + $0.drop { "=\":".contains($0) }.prefix { $0.isNumber || ".:[]".contains($0) } }
            return address != nil
        }
        return address
    }

    struct Answer: CustomStringConvertible {
        var status: UInt
        var text: String
        var description: String { "\(status): \(text)" }
    }

    static func get(_ url: String) async throws -> Answer {
        let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: url), timeout: .seconds(10))
        return Answer(status: response.status.code, text: String(buffer: try await response.body.collect(upTo: 1 << 20)))
    }

    /// Asks `url` every 100 ms until it answers `status`, for 30 s at most; the last answer.
    static func get(_ url: String, until status: UInt) async throws -> Answer {
        var answer = try await get(url)
        for _ in 0..<300 where answer.status != status {
            try await Task.sleep(for: .milliseconds(100))
            answer = try await get(url)
        }
        return answer
    }

    func startWatching(_ s: CloudKitEndToEndTests.Setup, pollInterval: Int) async throws -> ZonefeedBinary.Running {
        // An empty long poll ends after a second, so that the server stops at once at the end.
        try await s.server.admin("notifications", ["courierTimeoutMilliseconds": 1000])
        var z = s.zonefeed
        z.environment.merge(s.p.environment) { _, new in new }
        return try await z.start(["watch", s.file, "--poll-interval", "\(pollInterval)"])
    }

    /// Over plain HTTP, and over TLS with HTTP/2 where the courier is an HTTPS origin of its own
    /// (another port, its own certificate check, its own connection).
    @Test(arguments: [false, true])
    func aWatcherBringsEachChangeWithinSecondsAndStopsCleanlyOnSIGTERM(overTLS: Bool) async throws {
        let s = try await CloudKitEndToEndTests.Setup(
            overTLS ? "watchtls" : "watch", fake: FakeSettings(seed: 95, zones: 2, recordsPerZone: 400),
            server: FakeServerProcess.strict + (overTLS ? FakeServerProcess.tls : []))
        defer { s.stop() }
        let watching = try await startWatching(s, pollInterval: 600)
        #expect(await Self.within(.seconds(90)) { try await s.liveDifferences() == [] } != nil, "caught up: \(watching.stderrSoFar)")
        try await Self.waitUntilListening(s)

        // Without notifications the next poll is ten minutes away: each change arrives by push.
        for name in ["LIVE-1", "LIVE-2"] {
            try await s.addTag(name, to: "Zone02")
            let took = await Self.within(.seconds(30)) { try await s.hasRow(name, in: "Zone02") }
            #expect(took != nil, "\(name) arrived: \(watching.stderrSoFar)\n\(Self.sessions(s))")
            print("\(name) visible after \(took.map { "\($0)" } ?? "never")")
        }
        // The row is committed before the cycle's line is logged: the line is waited for.
        #expect(await Self.within(.seconds(30)) { watching.stderrSoFar.contains("trigger=notification") } != nil, "\(watching.stderrSoFar)")
        try await s.server.admin("records/delete", ["zone": "Zone02", "recordNames": ["LIVE-1"]])
        #expect(
            await Self.within(.seconds(30)) { try await DestinationSnapshot.read(s.p).rows[.init(zoneName: "Zone02", recordName: "LIVE-1")]?.deleted == true }
                != nil,
            "the deletion arrived as a tombstone")

        let output = await watching.stop()
        #expect(output.status == 0, "a requested stop: \(output.stderr)")
        let statuses = try await DestinationSnapshot.read(s.p).runStatuses
        #expect(statuses.count >= 4 && statuses.allSatisfy { $0 == "succeeded" || $0 == "interrupted" }, "\(statuses)")
    }

    @Test func withNotificationsDroppedTheSafetyPollStillBringsEveryChange() async throws {
        let s = try await CloudKitEndToEndTests.Setup("watchpoll", fake: FakeSettings(seed: 97, zones: 2, recordsPerZone: 300))
        defer { s.stop() }
        let watching = try await startWatching(s, pollInterval: 2)
        defer { watching.end() }
        #expect(await Self.within(.seconds(90)) { try await s.liveDifferences() == [] } != nil, "caught up: \(watching.stderrSoFar)")
        try await Self.waitUntilListening(s)
        try await s.server.admin("notifications", ["drop": true])
        // A new push token starts a cycle of its own (a change made before it was registered was
        // notified to nobody), which a loaded machine may begin seconds later, after a poll, and
        // which then brings a change made meanwhile. When it took the first change, a second is
        // made, which only the poll can bring.
        func pollLines() -> Int {
            watching.stderrSoFar.split(separator: "\n").count { $0.contains("cycle succeeded") && $0.contains("trigger=poll") }
        }
        var polled = false
        for name in ["POLLED-1", "POLLED-2"] where !polled {
            let before = pollLines()
            try await s.addTag(name, to: "Zone01")
            #expect(await Self.within(.seconds(30)) { try await s.hasRow(name, in: "Zone01") } != nil, "\(watching.stderrSoFar)\n\(Self.sessions(s))")
            // The row is committed before the cycle's lines are logged: they are waited for.
            polled = await Self.within(.seconds(15)) { pollLines() > before } != nil
        }
        #expect(polled, "a change came with the safety poll: \(watching.stderrSoFar)\n\(Self.sessions(s))")
        #expect(
            await Self.within(.seconds(30)) { watching.stderrSoFar.contains("the safety poll found changes no notification had announced") } != nil,
            "and the log says so: \(watching.stderrSoFar)")
        let state = try JSONSerialization.jsonObject(with: Data(try await s.server.admin("state").utf8)) as? [String: Any]
        let dropped = ((state?["notifications"] as? [String: Any])?["dropped"] as? NSNumber)?.intValue ?? 0
        #expect(dropped >= 1, "the notifications were dropped indeed: \(state ?? [:])")
    }

    @Test func aRefusedCourierGetsNewPushTokensAndChangesStillArrive() async throws {
        let s = try await CloudKitEndToEndTests.Setup("watchcourier", fake: FakeSettings(seed: 99, zones: 2, recordsPerZone: 300))
        defer { s.stop() }
        let watching = try await startWatching(s, pollInterval: 600)
        defer { watching.end() }
        #expect(await Self.within(.seconds(90)) { try await s.liveDifferences() == [] } != nil, "caught up: \(watching.stderrSoFar)")
        #expect(await Self.within(.seconds(30)) { watching.stderrSoFar.contains("subscribed to the zone's changes") } != nil, "\(watching.stderrSoFar)")
        try await s.server.admin("notifications", ["refuseCourier": true])
        #expect(
            await Self.within(.seconds(30)) { watching.stderrSoFar.contains("the web courier failed; getting a new push token") } != nil,
            "\(watching.stderrSoFar)")
        let tokensWhileRefused = try await s.server.notifications()["registeredTokens", default: 0]
        try await s.server.admin("notifications", ["refuseCourier": false])
        let pollsAtTheLift = try await s.server.notifications()["courierPolls", default: 0]
        // A token registered from now on, or a poll begun from now on, is answered by the
        // courier: the watcher listens again (on a loaded machine the refusal may have outlasted
        // a few new tokens, and pushed it to polling until its push retry). A token registered
        // just before the lift may be polled after it without a new one (CI met it).
        let listening = await Self.within(.seconds(90)) {
            let now = try await s.server.notifications()
            return now["registeredTokens", default: 0] > tokensWhileRefused || now["courierPolls", default: 0] > pollsAtTheLift
        }
        #expect(listening != nil, "a new push token after the refusal: \(watching.stderrSoFar)")
        // Within a minute: a push retry (30 s) and a cycle, where the ten-minute poll cannot.
        try await s.addTag("AFTER-REFUSAL", to: "Zone01")
        let arrived = await Self.within(.seconds(60)) { try await s.hasRow("AFTER-REFUSAL", in: "Zone01") }
        if arrived == nil {
            let notifications = try await s.server.notifications()
            let runs = try await DestinationSnapshot.read(s.p).runStatuses
            Issue.record("the change never arrived: \(notifications), runs \(runs)\n\(watching.stderrSoFar)\n\(Self.sessions(s))")
        }
    }

    /// A courier (or a proxy before it) that answers every long poll at once, with nothing: the
    /// watcher asks again at most four times a second, where it asked again at once, a loop of
    /// HTTP requests on a core for as long as it watched; and changes still arrive.
    @Test func aCourierThatAnswersAtOnceIsNotAskedInALoop() async throws {
        let s = try await CloudKitEndToEndTests.Setup("watchquick", fake: FakeSettings(seed: 117, zones: 1, recordsPerZone: 100))
        defer { s.stop() }
        let watching = try await startWatching(s, pollInterval: 600)
        defer { watching.end() }
        #expect(await Self.within(.seconds(90)) { try await s.liveDifferences() == [] } != nil, "caught up: \(watching.stderrSoFar)")
        #expect(await Self.within(.seconds(30)) { watching.stderrSoFar.contains("subscribed to the zone's changes") } != nil, "\(watching.stderrSoFar)")
        try await s.server.admin("notifications", ["courierTimeoutMilliseconds": 1])
        func polls() async throws -> Int { try await s.server.notifications()["courierPolls", default: 0] }
        /// Once the poll begun before has waited out its second (or been answered), polls
        /// answered at once follow. Eight more begin at least 250 ms apart, so the eighth begins
        /// seven pauses at least after the first (which began after the count was read, and so
        /// after the clock started: on a loaded machine the answer with the count can take a
        /// second, in which polls go on): 1.75 s. Asked again at once, they took a few
        /// milliseconds.
        func expectEightPollsPaced(_ answered: String) async throws {
            let set = try await polls()
            #expect(await Self.within(.seconds(30)) { try await polls() >= set + 2 } != nil, "the courier is polled again")
            let started = ContinuousClock.now
            let first = try await polls()
            let seen = await Self.within(.seconds(30)) { try await polls() >= first + 8 }
            let took = seen.map { _ in ContinuousClock.now - started }
            #expect(took.map { $0 >= .milliseconds(1_700) } == true, "eight polls answered \(answered) in \(took.map { "\($0)" } ?? "more than 30 s")")
        }
        try await expectEightPollsPaced("with nothing")
        // The same when every answer has a body (a proxy's page, `{}`), which was asked again at
        // once, each answer a cycle.
        try await s.server.admin("notifications", ["courierAnswer": "{}"])
        try await expectEightPollsPaced("with {}")
        try await s.server.admin("notifications", ["courierAnswer": ""])
        try await s.addTag("QUICK-COURIER", to: "Zone01")
        #expect(await Self.within(.seconds(30)) { try await s.hasRow("QUICK-COURIER", in: "Zone01") } != nil, "\(watching.stderrSoFar)")
    }

    /// Push that cannot be had (the courier refuses every token): after its retries, with
    /// backoff, the watcher says once that it polls, `/healthz` says notifications are off, and
    /// changes arrive with the safety poll; once the courier answers again, push is back.
    @Test func whenPushCannotBeHadTheWatcherPollsAndSaysSoOnceThenGetsPushBack() async throws {
        let s = try await CloudKitEndToEndTests.Setup("watchnopush", fake: FakeSettings(seed: 115, zones: 2, recordsPerZone: 200)) { p in
            p.moreSections = "watch:\n  listen: 127.0.0.1:0\n"
        }
        defer { s.stop() }
        try await s.server.admin("notifications", ["refuseCourier": true])
        let watching = try await startWatching(s, pollInterval: 2)
        defer { watching.end() }
        let base = try #require(await Self.listeningAddress(of: watching), "\(watching.stderrSoFar)")
        let unavailable = "change notifications are unavailable; polling every 2 s until they are back"
        #expect(await Self.within(.seconds(90)) { watching.stderrSoFar.contains(unavailable) } != nil, "\(watching.stderrSoFar)")
        let log = watching.stderrSoFar
        #expect(log.components(separatedBy: "the web courier failed; getting a new push token").count - 1 == 5, "five new tokens first: \(log)")
        let health = try await Self.get(base + "/healthz")
        #expect(health.status == 200 && health.text.contains("notifications: off (polling)"), "\(health)")
        // A connection that sends nothing is closed after the probes' idle timeout (30 s), and
        // one that trickles its request's body 10 s after the request began (the idle timeout
        // counts from the last piece read, and each byte was one), not held open for ever with
        // the process's file descriptors.
        let idle = Task { try await Self.secondsUntilClosed(.idle, connectionTo: base) }
        let trickling = Task { try await Self.secondsUntilClosed(.trickling, connectionTo: base) }
        // One that asks again every 20 s is ended after its first answer past a minute.
        let keptAlive = Task { try await Self.secondsUntilClosed(.keepingAlive, connectionTo: base) }

        try await s.addTag("WITHOUT-PUSH", to: "Zone01")
        #expect(await Self.within(.seconds(30)) { try await s.hasRow("WITHOUT-PUSH", in: "Zone01") } != nil, "\(watching.stderrSoFar)\n\(Self.sessions(s))")

        // Push is tried again every 30 s; with the courier answering, it is back.
        try await s.server.admin("notifications", ["refuseCourier": false])
        #expect(await Self.within(.seconds(90)) { watching.stderrSoFar.contains("change notifications are back") } != nil, "\(watching.stderrSoFar)")
        #expect(try await Self.get(base + "/healthz", until: 200).text.contains("notifications: on"))
        #expect(watching.stderrSoFar.components(separatedBy: unavailable).count - 1 == 1, "said once")
        let closedAfter = try await idle.value
        #expect(closedAfter.map { $0 >= 25 && $0 < 60 } == true, "an idle connection closed after \(closedAfter.map { "\($0) s" } ?? "more than 90 s")")
        let trickledFor = try await trickling.value
        #expect(
            trickledFor.map { $0 >= 8 && $0 < 25 } == true, "a trickling request's connection closed after \(trickledFor.map { "\($0) s" } ?? "more than 90 s")"
        )
        let keptAliveFor = try await keptAlive.value
        #expect(
            keptAliveFor.map { $0 >= 55 && $0 < 85 } == true,
            "a connection kept alive closed after \(keptAliveFor.map { "\($0) s" } ?? "more than 90 s")")
    }

    /// Opens a TCP connection to `base` (`http://host:port`) and returns how many seconds passed
    /// until the server closed it; nil if it had not within 90 s. Idle, it sends nothing;
    /// trickling, it begins a request with a long body and sends a byte of the body every second
    /// (whatever the server answers meanwhile); keeping alive, it sends a whole request every
    /// 20 s on the same connection. Blocking reads, on a thread of their own.
    static func secondsUntilClosed(_ kind: ProbeClient, connectionTo base: String) async throws -> Double? {
        let address = base.dropFirst("http://".count)
        let host = String(address.prefix { $0 != ":" })
        let port = try #require(UInt16(address.drop { $0 != ":" }.dropFirst()))
        return try await onAThreadOfItsOwn {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(fd) }
            var peer = sockaddr_in()
            peer.sin_family = sa_family_t(AF_INET)
            peer.sin_port = port.bigEndian
            inet_pton(AF_INET, host, &peer.sin_addr)
            let connected = withUnsafePointer(to: &peer) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard connected == 0 else { return nil }
            func send(_ text: String) -> Bool {
                var bytes = Array(text.utf8)
                return Glibc.send(fd, &bytes, bytes.count, Int32(MSG_NOSIGNAL)) == bytes.count
            }
            var wait = timeval(tv_sec: kind == .idle ? 90 : 1, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
            let start = ContinuousClock.now
            if kind == .trickling, !send("POST /healthz HTTP/1.1\r\nHost: probe\r\nContent-Length: 100000\r\n\r\n") { return nil }
            let ask = "GET /healthz HTTP/1.1\r\nHost: probe\r\n\r\n"
            var asked = start
            if kind == .keepingAlive, !send(ask) { return nil }
            var buffer = [UInt8](repeating: 0, count: 4096)
            while ContinuousClock.now - start < .seconds(90) {
                // 0: closed by the server; -1: the wait passed; more: an answer, read and let be.
                let got = recv(fd, &buffer, buffer.count, 0)
                if got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK) { break }
                if kind == .idle, got < 0 { return nil }
                if kind == .trickling, got < 0, !send("x") { break }
                if kind == .keepingAlive, ContinuousClock.now - asked >= .seconds(20) {
                    asked = ContinuousClock.now
                    if !send(ask) { break }
                }
            }
            let elapsed = ContinuousClock.now - start
            guard elapsed < .seconds(90) else { return nil }
            return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        }
    }

    enum ProbeClient { case idle, trickling, keepingAlive }

    /// A zone created while watching has no subscription yet: the safety poll finds it through
    /// the database feed, and from then on it is subscribed to; deleted, its rows are tombstoned
    /// and its subscription removed.
    @Test func aZoneCreatedWhileWatchingIsFoundByThePollThenSubscribedAndForgottenWhenDeleted() async throws {
        let s = try await CloudKitEndToEndTests.Setup("watchzones", fake: FakeSettings(seed: 101, zones: 2, recordsPerZone: 300))
        defer { s.stop() }
        let watching = try await startWatching(s, pollInterval: 2)
        defer { watching.end() }
        #expect(await Self.within(.seconds(90)) { try await s.liveDifferences() == [] } != nil, "caught up: \(watching.stderrSoFar)")
        try await Self.waitUntilListening(s)
        func subscriptions() async throws -> Int? {
            let state = try JSONSerialization.jsonObject(with: Data(try await s.server.admin("state").utf8)) as? [String: Any]
            return ((state?["notifications"] as? [String: Any])?["subscriptions"] as? NSNumber)?.intValue
        }
        #expect(try await subscriptions() == 2)

        try await s.addTag("IN-NEW-ZONE", to: "ZoneNew")  // creates the zone
        #expect(await Self.within(.seconds(30)) { try await s.hasRow("IN-NEW-ZONE", in: "ZoneNew") } != nil, "\(watching.stderrSoFar)\n\(Self.sessions(s))")
        var subscribed = false
        for _ in 0..<100 where !subscribed {
            subscribed = try await subscriptions() == 3
            if !subscribed { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(subscribed, "the new zone got its subscription: \(watching.stderrSoFar)")

        try await s.server.admin("zones/delete", ["zone": "ZoneNew"])
        #expect(
            await Self.within(.seconds(30)) {
                try await DestinationSnapshot.read(s.p).rows[.init(zoneName: "ZoneNew", recordName: "IN-NEW-ZONE")]?.deleted == true
            } != nil, "the deleted zone's rows are tombstoned: \(watching.stderrSoFar)")
        var forgotten = false
        for _ in 0..<100 where !forgotten {
            forgotten = try await subscriptions() == 2
            if !forgotten { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(forgotten, "the deleted zone's subscription was removed: \(watching.stderrSoFar)")
    }

    /// Two watchers of one pipeline (a Deployment with two replicas, sharing one session through
    /// the database's token store) against the strict token window: both hear every change,
    /// zones are claimed with PostgreSQL locks, and each change is applied once. Each one's
    /// rotations retire the token the other holds; a watcher refused goes on with the newest token
    /// the other saved.
    @Test func twoWatchersOnOnePipelineApplyEachChangeOnce() async throws {
        let s = try await CloudKitEndToEndTests.Setup("watchtwo", fake: FakeSettings(seed: 103, zones: 2, recordsPerZone: 300)) {
            $0.webAuthTokenStore = "database"
            $0.webAuthTokenFile = nil
        }
        defer { s.stop() }
        let first = try await startWatching(s, pollInterval: 600)
        let second = try await startWatching(s, pollInterval: 600)
        defer {
            first.end()
            second.end()
        }
        #expect(await Self.within(.seconds(90)) { try await s.liveDifferences() == [] } != nil, "caught up:\n\(first.stderrSoFar)\n\(second.stderrSoFar)")
        // Both watchers have registered a push token (each after subscribing): every change from
        // now on is queued for both.
        let registered = await Self.within(.seconds(60)) { try await s.server.admin("state").contains("\"registeredTokens\":2") }
        try #require(registered != nil, "both watchers registered a push token:\n\(first.stderrSoFar)\n\(second.stderrSoFar)")
        // The cycles before the changes are over: each watcher's catch-up, and the one it starts
        // when it begins listening. The changes are brought by the cycles they start.
        let quiet = await Self.within(.seconds(60)) {
            let statuses = try await DestinationSnapshot.read(s.p).runStatuses
            return statuses.count >= 4 && !statuses.contains("running")
        }
        let statusesAfterCatchUp = (try? await DestinationSnapshot.read(s.p).runStatuses) ?? []
        try #require(quiet != nil, "each watcher's first two cycles ended: \(statusesAfterCatchUp)")

        let changesBegan = try Self.databaseNow(s)
        let names = (1...6).map { "BOTH-\($0)" }
        for (i, name) in names.enumerated() {
            try await s.addTag(name, to: i % 2 == 0 ? "Zone01" : "Zone02")
            try await Task.sleep(for: .milliseconds(150))
        }
        #expect(
            await Self.within(.seconds(30)) {
                for (i, name) in names.enumerated() where try await !s.hasRow(name, in: i % 2 == 0 ? "Zone01" : "Zone02") { return false }
                return true
            } != nil, "every change arrived:\n\(first.stderrSoFar)\n\(second.stderrSoFar)")
        // Both heard every change: each watcher's courier took every notification queued for it.
        let delivered = await Self.within(.seconds(30)) {
            let state = try JSONSerialization.jsonObject(with: Data(try await s.server.admin("state").utf8)) as? [String: Any]
            let counts = (state?["notifications"] as? [String: Any] ?? [:]).compactMapValues { ($0 as? NSNumber)?.intValue }
            return counts["queued", default: 0] >= names.count * 2 && counts["delivered"] == counts["queued"]
        }
        let state = delivered == nil ? (try? await s.server.admin("state")) ?? "" : ""
        try #require(delivered != nil, "every notification reached both watchers: \(state)")
        // And the cycles the notifications started are over. A watcher begins one a debounce
        // (250 ms) after a notification, and nothing outside it shows that wait: so this is a
        // settle, not a proof: the run ledger unchanged for a second with no run running. A cycle
        // begun later still (a loaded machine) would escape the count below.
        let settled = await Self.runsHoldStill(s, for: .seconds(1))
        let statusesAfterChanges = (try? await DestinationSnapshot.read(s.p).runStatuses) ?? []
        try #require(settled != nil, "the cycles ended: \(statusesAfterChanges)")
        #expect(try Self.runners(s, since: changesBegan) == [first.pid, second.pid], "both watchers ran a cycle after the changes")
        let snapshot = try await DestinationSnapshot.read(s.p)
        #expect(snapshot.runUpserts == s.p.expected().liveCount + names.count, "every record upserted once across both watchers' runs")
        #expect(
            await Self.within(.seconds(30)) { first.stderrSoFar.contains("trigger=notification") || second.stderrSoFar.contains("trigger=notification") }
                != nil)
        let takenOver = [first, second].map { $0.stderrSoFar.components(separatedBy: "another process rotated the web auth token on").count - 1 }
        print("two watchers on one session: went on with the other's newest token \(takenOver) times")
    }

    /// SIGTERM while a burst's cycle waits on the server: the cycle is recorded `interrupted` and
    /// the watcher exits 0; the next watcher resumes from the checkpoints, and across both every
    /// change is applied once.
    @Test func sigtermDuringABurstExitsZeroAndTheNextWatcherAppliesEachChangeOnce() async throws {
        let s = try await CloudKitEndToEndTests.Setup("watchburst", fake: FakeSettings(seed: 107, zones: 2, recordsPerZone: 300)) { p in
            p.commitEvery = 100
        }
        defer { s.stop() }
        let first = try await startWatching(s, pollInterval: 600)
        #expect(await Self.within(.seconds(90)) { try await s.liveDifferences() == [] } != nil, "caught up: \(first.stderrSoFar)")
        try await Self.waitUntilListening(s)

        // Zone02's next page is held for ten minutes: the burst's cycle applies Zone01's half and
        // waits on Zone02 until the stop, however slow the machine.
        try await s.server.admin("faults/hold", ["zone": "Zone02", "milliseconds": 600_000])
        let burst = (1...2_000).map { "BURST-\($0)" }
        for (zone, names) in [("Zone01", burst[..<1_000]), ("Zone02", burst[1_000...])] {
            let records = names.map { Record(recordName: $0, recordType: "Tag", recordChangeTag: "\($0)-1", fields: [:]) }
            try await s.server.admin("records/add", ["zone": zone, "records": try FakeServerProcess.wire(records)])
        }
        func burstRows() async throws -> Int { try await DestinationSnapshot.read(s.p).rows.keys.filter { $0.recordName.hasPrefix("BURST-") }.count }
        #expect(await Self.within(.seconds(60)) { try await burstRows() == 1_000 } != nil, "Zone01's half was applied: \(first.stderrSoFar)")
        var waiting = false
        for _ in 0..<1_200 where !waiting {
            waiting = try await s.server.traffic()["inFlight", default: 0] == 1
            if !waiting { try await Task.sleep(for: .milliseconds(50)) }
        }
        let traffic = try await s.server.traffic()
        #expect(waiting, "a cycle waits on Zone02's page: \(traffic) \(first.stderrSoFar)")
        let stopped = await first.stop()
        #expect(stopped.status == 0, "a requested stop: \(stopped.stderr)")
        #expect(try await burstRows() == 1_000, "Zone02's half waits for the next watcher")
        let statuses = try await DestinationSnapshot.read(s.p).runStatuses
        #expect(statuses.last == "interrupted", "the cycle in flight is recorded interrupted: \(statuses) \(stopped.stderr)")

        try await s.server.admin("faults/clear")
        let second = try await startWatching(s, pollInterval: 600)
        #expect(
            await Self.within(.seconds(90)) {
                guard try await burstRows() == burst.count else { return false }
                return try await s.liveDifferences(besides: Set(burst)) == []
            } != nil,
            "the next watcher caught up: \(second.stderrSoFar)")
        await #expect(second.stop().status == 0)
        let snapshot = try await DestinationSnapshot.read(s.p)
        #expect(snapshot.runUpserts == s.p.expected().liveCount + burst.count, "every record upserted once across both watchers' cycles")
    }

    /// `watch.listen`: `/healthz` answers 503 while catching up, 200 once caught up, 503 when the
    /// cycles have failed for longer than `unhealthyAfter` (saying why), and 200 again when they
    /// succeed; `/metrics` serves the run metrics, live.
    @Test func healthzFollowsTheCyclesAndMetricsAreServedLive() async throws {
        let s = try await CloudKitEndToEndTests.Setup("watchhealth", fake: FakeSettings(seed: 109, zones: 2, recordsPerZone: 300)) { p in
            p.retryBudgetSeconds = 2
            p.moreSections = "watch:\n  listen: 127.0.0.1:0\n  unhealthyAfter: 1\n"
        }
        defer { s.stop() }
        // Every CloudKit request takes 20 s until the test has seen the watcher catching up: far
        // longer than the test can take to ask, even on a loaded machine.
        try await s.server.admin("faults/delay", ["milliseconds": 20_000])
        let watching = try await startWatching(s, pollInterval: 1)
        defer { watching.end() }
        let base = try #require(await Self.listeningAddress(of: watching), "the address is logged: \(watching.stderrSoFar)")
        func get(_ path: String) async throws -> Answer { try await Self.get(base + path) }
        func healthz(until status: UInt) async throws -> Answer { try await Self.get(base + "/healthz", until: status) }

        let early = try await get("/healthz")
        #expect(early.status == 503 && early.text.hasPrefix("catching up"), "\(early)")
        try await s.server.admin("faults/clear")
        #expect(await Self.within(.seconds(60)) { try await s.liveDifferences() == [] } != nil, "caught up: \(watching.stderrSoFar)")
        let healthy = try await healthz(until: 200)
        #expect(healthy.status == 200 && healthy.text.hasPrefix("ok"), "\(healthy)")

        // A poll starts a cycle every second, and while one runs its status is `running`: the
        // metrics are read again until they show a cycle ended (however slow the machine).
        var metrics = try await get("/metrics")
        var upserted = 0
        let succeeded = await Self.within(.seconds(30)) {
            metrics = try await get("/metrics")
            upserted = try await DestinationSnapshot.read(s.p).runUpserts
            let exposed = try PrometheusText(parsing: metrics.text)
            return exposed.value("zonefeed_run_status", ["pipeline": s.p.name, "status": "succeeded"]) == 1
                && exposed.value("zonefeed_records_total", ["pipeline": s.p.name, "outcome": "upserted"]) == Double(upserted)
        }
        #expect(metrics.status == 200)
        #expect(succeeded != nil, "a cycle succeeded and the counters add up over the cycles (\(upserted) upserted): \(metrics.text)")

        // The source fails: every database feed request answers 503, past the 2 s retry budget.
        try await s.server.admin("faults/fail", ["status": 503, "count": 100_000, "pathSuffix": "changes/database"])
        let unhealthy = try await healthz(until: 503)
        #expect(unhealthy.status == 503 && unhealthy.text.hasPrefix("unhealthy"), "\(unhealthy)\n\(watching.stderrSoFar)\n\(Self.sessions(s))")
        #expect(unhealthy.text.contains("last error:"), "it says why: \(unhealthy)")
        #expect(!unhealthy.text.contains(s.p.webAuthToken), "no secret in /healthz")
        var failing = ""
        let failed = await Self.within(.seconds(30)) {
            failing = try await get("/metrics").text
            return try PrometheusText(parsing: failing).value("zonefeed_run_status", ["pipeline": s.p.name, "status": "failed"]) == 1
        }
        #expect(failed != nil, "the failed cycle is live in /metrics: \(failing)")

        try await s.server.admin("faults/clear")
        let recovered = try await healthz(until: 200)
        #expect(recovered.status == 200, "healthy again once a cycle succeeds: \(recovered)")

        // A cycle that cannot start (its destination refuses it: here its tables are another
        // pipeline's) is live in /metrics too, not the last success's status and exit code.
        let tables = "\(quoteIdentifier(s.p.schema)).zonefeed_tables"
        _ = try await Connection.withConnectionOffPool(s.p.url) { c in try c.execute("UPDATE \(tables) SET pipeline = 'another'") }
        var refusedText = ""
        let refused = await Self.within(.seconds(30)) {
            refusedText = try await get("/metrics").text
            let exposed = try PrometheusText(parsing: refusedText)
            return exposed.value("zonefeed_run_status", ["pipeline": s.p.name, "status": "refused"]) == 1
                && exposed.value("zonefeed_run_exit_code", ["pipeline": s.p.name]) == 1
        }
        #expect(refused != nil, "the refused cycle is live in /metrics: \(refusedText)\n\(watching.stderrSoFar)")
        _ = try await Connection.withConnectionOffPool(s.p.url) { [name = s.p.name] c in
            try c.query("UPDATE \(tables) SET pipeline = $1", [name])
        }
        #expect(try await healthz(until: 200).status == 200)
    }
}
