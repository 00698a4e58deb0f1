import Testing

@testable import CloudKitWebServices

/// Throttling pauses every request that must wait with the throttled one, lowers how many may
/// be in flight to half of what was, and keeps under a server's hard cap once found; successes
/// grow it back one at a time. A limiter that waited out a pause it must not would wait an
/// hour: the time limit ends the test instead.
@Suite(.timeLimit(.minutes(2))) struct RequestLimiterTests {
    @Test func aThrottlePausesEveryRequestAndCountsTheWaitOnce() async throws {
        let limiter = RequestLimiter(maxConcurrent: 8)
        let first = try await limiter.acquire()
        let second = try await limiter.acquire()
        // From before the first throttle: however long the second release takes on a loaded
        // machine, the pause counts from no earlier than this.
        let started = ContinuousClock.now
        await limiter.release(first, .throttled(pause: 0.3))
        await limiter.release(second, .throttled(pause: 0.3))
        let released = (ContinuousClock.now - started).seconds
        let third = try await limiter.acquire()
        let elapsed = (ContinuousClock.now - started).seconds
        #expect(elapsed >= 0.29, "a request that was not throttled waits too: \(elapsed) s")
        await limiter.release(third, .succeeded)
        let waited = await limiter.throttledSeconds
        // One wait runs from the first throttle to 0.3 s after the second: at most 0.3 s and the
        // time the two releases took (0.3 s on an idle machine, as `< 0.5` had it), and never
        // more than the time that passed. Counted twice it would be 0.6 s.
        #expect(
            waited >= 0.29 && waited <= min(elapsed, released + 0.3) + 0.01,
            "two throttles at once are one wait: \(waited) s, the releases took \(released) s, \(elapsed) s in all")
    }

    @Test func aWaitTheThrottledRequestWillNotMakeHoldsNoOtherBack() async throws {
        let limiter = RequestLimiter(maxConcurrent: 8)
        let gaveUp = try await limiter.acquire()
        // The request was asked to wait an hour and gives up instead: nobody waits for it.
        await limiter.release(gaveUp, .throttled(pause: nil))
        let started = ContinuousClock.now
        let next = try await limiter.acquire()
        #expect(ContinuousClock.now - started < .seconds(60), "not the hour")
        await limiter.release(next, .succeeded)
        #expect(await limiter.throttledSeconds == 0, "no time is reported that nobody waited")
    }

    @Test func aThrottleWhileOthersGetThroughLowersTheLimitAndPausesNoOne() async throws {
        let limiter = RequestLimiter(maxConcurrent: 8)
        let wave = [try await limiter.acquire(), try await limiter.acquire(), try await limiter.acquire()]
        await limiter.release(wave[0], .succeeded)
        await limiter.release(wave[1], .succeeded)
        await limiter.release(wave[2], .throttled(pause: 3_600))
        let started = ContinuousClock.now
        let next = try await limiter.acquire()
        #expect(ContinuousClock.now - started < .seconds(60), "the server answered others meanwhile: not the hour's pause")
        #expect(await limiter.throttledSeconds == 0)
        #expect(await limiter.currentLimit == 1, "half of the three in flight")
        await limiter.release(next, .succeeded)
    }

    @Test func theTimeReportedIsTheTimeThatPassedAndNoNumberTraps() async throws {
        let limiter = RequestLimiter(maxConcurrent: 8)
        let started = ContinuousClock.now
        await limiter.release(try await limiter.acquire(), .throttled(pause: 1e300))
        try await Task.sleep(for: .milliseconds(200))
        let waited = await limiter.throttledSeconds
        let passed = (ContinuousClock.now - started) / .seconds(1)
        #expect(waited >= 0.19 && waited <= passed, "a pause under way counts what has passed of it: \(waited) of \(passed) s")
    }

    @Test func aThrottleHalvesWhatWasInFlightOnceAndSuccessesGrowItBack() async throws {
        let limiter = RequestLimiter(maxConcurrent: 16)
        let tickets = [try await limiter.acquire(), try await limiter.acquire(), try await limiter.acquire(), try await limiter.acquire()]
        for ticket in tickets { await limiter.release(ticket, .throttled(pause: nil)) }
        #expect(await limiter.currentLimit == 2, "four in flight, one overload: half of four, not half of sixteen")
        var successes = 0
        while await limiter.currentLimit < 3 {
            await limiter.release(try await limiter.acquire(), .succeeded)
            successes += 1
            try #require(successes < 100)
        }
        #expect((2...3).contains(successes), "about one full round of successes adds one: \(successes)")
    }

    /// A server that refuses a third request in flight: the limit stays at two, and goes to
    /// three (a probe) only after enough successes; a refused probe pauses no one and the next
    /// one waits twice as long; three probes that succeed lift the ceiling.
    @Test func aServersCapIsFoundAndProbedSeldom() async throws {
        let limiter = try await Self.limiterThatMetACapOfTwo()

        let pairs = try await Self.succeedTwoAtATime(limiter, untilTheLimitIs: 3)
        #expect(pairs * 2 >= RequestLimiter.firstProbeAfter, "no probe before \(RequestLimiter.firstProbeAfter) successes: \(pairs * 2)")

        let probe = [try await limiter.acquire(), try await limiter.acquire(), try await limiter.acquire()]
        let pausedBefore = await limiter.throttledSeconds
        await limiter.release(probe[2], .throttled(pause: 3_600))
        let nextProbe = await limiter.successesBeforeProbe
        #expect(nextProbe == RequestLimiter.firstProbeAfter * 2, "the next probe waits twice as long: \(nextProbe)")
        await limiter.release(probe[0], .succeeded)
        let started = ContinuousClock.now
        let other = try await limiter.acquire()
        #expect(ContinuousClock.now - started < .seconds(60), "a refused probe is its own wait (an hour), not everyone's")
        #expect(await limiter.throttledSeconds - pausedBefore < 0.01)
        #expect(await limiter.currentLimit == 2)
        for ticket in [probe[1], other] { await limiter.release(ticket, .succeeded) }

        for probe in 1...RequestLimiter.probesToLift {
            let pairs = try await Self.succeedTwoAtATime(limiter, untilTheLimitIs: 3)
            #expect(pairs * 2 + 2 >= RequestLimiter.firstProbeAfter, "each probe waits its turn (the two beside the last one count): \(pairs * 2)")
            let three = [try await limiter.acquire(), try await limiter.acquire(), try await limiter.acquire()]
            await limiter.release(three[2], .succeeded)
            if probe < RequestLimiter.probesToLift {
                #expect(await limiter.ceiling == 3, "probe \(probe) got through: one may be a miscount, the cap stands")
                #expect(await limiter.currentLimit == 2)
            } else {
                #expect(await limiter.ceiling == nil, "the server took three at once, \(probe) times: its cap is gone")
            }
            for ticket in three.prefix(2) { await limiter.release(ticket, .succeeded) }
        }
    }

    /// A probe that succeeds after another request came back while it was out leaves the
    /// ceiling: the server may have let that one go before the probe arrived, and held two.
    @Test func aProbeThatSucceedsAfterAnotherCameBackLeavesTheCeiling() async throws {
        let limiter = try await Self.limiterThatMetACapOfTwo()

        _ = try await Self.succeedTwoAtATime(limiter, untilTheLimitIs: 3)
        let probe = [try await limiter.acquire(), try await limiter.acquire(), try await limiter.acquire()]
        await limiter.release(probe[0], .succeeded)
        await limiter.release(probe[2], .succeeded)
        #expect(await limiter.ceiling == 3, "one came back while the probe was out: the cap stands")
        #expect(await limiter.probesSucceeded == 0, "and the probe does not count towards lifting it")
        #expect(await limiter.currentLimit == 2, "the next probe waits its turn")
        await limiter.release(probe[1], .succeeded)
    }

    /// The first request sent reaches the server after two others (HTTP/2 streams over a
    /// connection still opening: CI met it over TLS) and is the first refused: its company is
    /// the others still out, and the cap is found all the same, not left to the halving alone.
    @Test func aCapIsFoundWhenTheFirstRequestSentIsTheFirstRefused() async throws {
        let limiter = RequestLimiter(maxConcurrent: 8)
        var tickets: [RequestLimiter.Ticket] = []
        for _ in 0..<8 { tickets.append(try await limiter.acquire()) }
        await limiter.release(tickets[0], .throttled(pause: nil))
        #expect(await limiter.ceiling != nil, "refused with seven others out: the server has a cap")
        for ticket in tickets[1..<3] { await limiter.release(ticket, .succeeded) }
        for ticket in tickets[3...] { await limiter.release(ticket, .throttled(pause: nil)) }
        let ceiling = await limiter.ceiling
        #expect(ceiling == 4, "the fewest in flight at a refusal with company: \(String(describing: ceiling))")
        #expect(await limiter.currentLimit <= 3)
    }

    @Test func theLimitIsHeldAndFreedSlotsGoToWaiters() async throws {
        let limiter = RequestLimiter(maxConcurrent: 2)
        let a = try await limiter.acquire()
        _ = try await limiter.acquire()
        let waiter = Task { try await limiter.acquire() }
        try await Self.untilWaiting(1, limiter)
        #expect(await limiter.inFlight == 2, "the third request waits")
        await limiter.release(a, .succeeded)
        _ = try await waiter.value
        #expect(await limiter.inFlight == 2)
        #expect(await limiter.peakInFlight == 2)
    }

    @Test func oneAtATimeDrainsWhatIsInFlightAndThenLetsOneThrough() async throws {
        let limiter = RequestLimiter(maxConcurrent: 8)
        let a = try await limiter.acquire()
        let b = try await limiter.acquire()
        #expect(await limiter.becomeOneAtATime())
        #expect(await !limiter.becomeOneAtATime(), "only the first says it is new")
        let drained = Task { await limiter.drain() }
        try await Self.untilWaiting(1, limiter)
        await limiter.release(a, .failed)
        try await Self.untilWaiting(1, limiter)
        #expect(await limiter.inFlight == 1, "the drain waits for the last one in flight")
        await limiter.release(b, .succeeded)
        await drained.value
        let c = try await limiter.acquire()
        let blocked = Task { try await limiter.acquire() }
        try await Self.untilWaiting(1, limiter)
        #expect(await limiter.inFlight == 1, "one at a time: the second waits")
        await limiter.release(c, .succeeded)
        _ = try await blocked.value
        #expect(await limiter.currentLimit == 1, "successes do not raise it again")
    }

    /// Returns once `count` callers wait in the limiter; fails the test when they do not within
    /// 30 s. It sleeps between looks, giving the thread back.
    static func untilWaiting(_ count: Int, _ limiter: RequestLimiter, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while case let waiting = await limiter.waiters, waiting != count {
            try #require(ContinuousClock.now < deadline, "\(count) waiting, not \(waiting)", sourceLocation: sourceLocation)
            try await Task.sleep(for: .milliseconds(1))
        }
    }

    /// A limiter of eight whose first wave of four met a server that takes two: the third and
    /// fourth were throttled, so the ceiling is three and the limit two.
    static func limiterThatMetACapOfTwo(sourceLocation: SourceLocation = #_sourceLocation) async throws -> RequestLimiter {
        let limiter = RequestLimiter(maxConcurrent: 8)
        let wave = [try await limiter.acquire(), try await limiter.acquire(), try await limiter.acquire(), try await limiter.acquire()]
        await limiter.release(wave[0], .succeeded)
        await limiter.release(wave[1], .succeeded)
        await limiter.release(wave[2], .throttled(pause: 0.05))
        await limiter.release(wave[3], .throttled(pause: 0.05))
        #expect(await limiter.ceiling == 3, "the third in flight was refused", sourceLocation: sourceLocation)
        try #require(await limiter.currentLimit == 2, sourceLocation: sourceLocation)
        return limiter
    }

    /// Two requests at a time succeed until the limit reaches `limit`; how many rounds it took.
    static func succeedTwoAtATime(_ limiter: RequestLimiter, untilTheLimitIs limit: Int) async throws -> Int {
        var rounds = 0
        while await limiter.currentLimit < limit {
            let a = try await limiter.acquire()
            let b = try await limiter.acquire()
            await limiter.release(a, .succeeded)
            await limiter.release(b, .succeeded)
            rounds += 1
            try #require(rounds < 100)
        }
        return rounds
    }
}
