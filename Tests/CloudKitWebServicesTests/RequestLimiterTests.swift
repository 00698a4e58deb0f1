import Testing

@testable import CloudKitWebServices

/// Throttling pauses every request of the client and halves how many may be in flight;
/// successes grow it back one at a time.
@Suite struct RequestLimiterTests {
    @Test func aThrottlePausesEveryRequestAndCountsTheWaitOnce() async throws {
        let limiter = RequestLimiter(maxConcurrent: 8)
        let first = try await limiter.acquire()
        let second = try await limiter.acquire()
        await limiter.release(first, .throttled(retryAfter: 0.3))
        await limiter.release(second, .throttled(retryAfter: 0.3))
        let started = ContinuousClock.now
        let third = try await limiter.acquire()
        #expect(ContinuousClock.now - started >= .milliseconds(250), "a request that was not throttled waits too")
        await limiter.release(third, .succeeded)
        let waited = await limiter.throttledSeconds
        #expect(waited >= 0.29 && waited < 0.5, "two throttles at once are one wait: \(waited)")
    }

    @Test func oneEpisodeHalvesTheLimitOnceAndSuccessesGrowItBack() async throws {
        let limiter = RequestLimiter(maxConcurrent: 8)
        let tickets = [try await limiter.acquire(), try await limiter.acquire(), try await limiter.acquire()]
        for ticket in tickets { await limiter.release(ticket, .throttled(retryAfter: nil)) }
        #expect(await limiter.currentLimit == 4, "three requests of one overload halve the limit once")
        var successes = 0
        while await limiter.currentLimit < 5 {
            await limiter.release(try await limiter.acquire(), .succeeded)
            successes += 1
        }
        #expect((4...5).contains(successes), "about one full round of successes adds one: \(successes)")
        let again = try await limiter.acquire()
        await limiter.release(again, .throttled(retryAfter: nil))
        #expect(await limiter.currentLimit == 2)
    }

    @Test func theLimitIsHeldAndFreedSlotsGoToWaiters() async throws {
        let limiter = RequestLimiter(maxConcurrent: 2)
        let a = try await limiter.acquire()
        _ = try await limiter.acquire()
        let waiter = Task { try await limiter.acquire() }
        try await Task.sleep(for: .milliseconds(100))
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
        await limiter.release(a, .failed)
        try await Task.sleep(for: .milliseconds(50))
        #expect(await limiter.inFlight == 1)
        await limiter.release(b, .succeeded)
        await drained.value
        let c = try await limiter.acquire()
        let blocked = Task { try await limiter.acquire() }
        try await Task.sleep(for: .milliseconds(50))
        #expect(await limiter.inFlight == 1)
        await limiter.release(c, .succeeded)
        _ = try await blocked.value
        #expect(await limiter.currentLimit == 1, "successes do not raise it again")
    }
}
