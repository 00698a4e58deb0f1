/// How many requests of one client are in flight at once, and when none may start.
///
/// - The limit starts at `maxConcurrent` and adapts (additive increase, multiplicative decrease,
///   as TCP does): each success adds `1 / limit`, so a full round of successes adds one; a
///   throttle halves it, once per episode (the requests that were in flight with it are answered
///   by the same overload and do not halve it again).
/// - A throttle with `retryAfter` pauses every request of the client until then, not only the
///   one that got it; `throttledSeconds` adds up the time paused.
/// - `oneAtATime` is for servers that accept only the newest web auth token or two: once set,
///   the limit is one for good.
actor RequestLimiter {
    let maxConcurrent: Int
    private(set) var limit: Double
    private(set) var oneAtATime: Bool
    private(set) var inFlight = 0
    private(set) var peakInFlight = 0
    private(set) var throttledSeconds = 0.0
    private var pausedUntil: ContinuousClock.Instant?
    /// Bumped by every decrease: a ticket from an earlier episode does not decrease again.
    private var episode = 0
    /// Requests waiting for the others to finish (`drain`); no new request starts meanwhile.
    private var draining = 0
    private var waiting: [CheckedContinuation<Void, Never>] = []

    struct Ticket: Sendable {
        let episode: Int
    }

    enum Outcome: Sendable {
        case succeeded
        /// Throttled, with the server's `retryAfter` in seconds, if it gave one.
        case throttled(retryAfter: Double?)
        case failed
    }

    init(maxConcurrent: Int, oneAtATime: Bool = false) {
        self.maxConcurrent = max(1, maxConcurrent)
        self.oneAtATime = oneAtATime
        limit = Double(self.maxConcurrent)
    }

    /// How many requests may be in flight now.
    var currentLimit: Int { oneAtATime ? 1 : max(1, Int(limit)) }

    /// Waits for a slot: no pause, nobody draining, fewer than the limit in flight.
    func acquire() async throws -> Ticket {
        while true {
            try Task.checkCancellation()
            if let until = pausedUntil, until > .now {
                try await Task.sleep(until: until)
                continue
            }
            if draining == 0, inFlight < currentLimit {
                inFlight += 1
                peakInFlight = max(peakInFlight, inFlight)
                return Ticket(episode: episode)
            }
            await withCheckedContinuation { waiting.append($0) }
        }
    }

    /// Gives the slot back and learns from how the request went. Returns whether requests go
    /// one at a time.
    @discardableResult
    func release(_ ticket: Ticket, _ outcome: Outcome) -> Bool {
        inFlight -= 1
        switch outcome {
        case .succeeded:
            limit = min(Double(maxConcurrent), limit + 1 / limit)
        case .throttled(let retryAfter):
            if ticket.episode == episode {
                limit = max(1, limit / 2)
                episode += 1
            }
            if let retryAfter, retryAfter > 0 { pause(for: retryAfter) }
        case .failed:
            break
        }
        wakeAll()
        return oneAtATime
    }

    /// From now on, one request at a time. Returns whether that is new.
    func becomeOneAtATime() -> Bool {
        defer { oneAtATime = true }
        return !oneAtATime
    }

    /// Returns once no request is in flight; none starts meanwhile. The caller holds no slot.
    func drain() async {
        draining += 1
        while inFlight > 0 { await withCheckedContinuation { waiting.append($0) } }
        draining -= 1
        wakeAll()
    }

    /// No request starts before `seconds` from now; the time counts once however many requests
    /// were told to wait.
    private func pause(for seconds: Double) {
        let now = ContinuousClock.now
        let until = now + .milliseconds(Int64((seconds * 1000).rounded(.up)))
        let pausedFrom = max(pausedUntil ?? now, now)
        if until > pausedFrom {
            throttledSeconds += (until - pausedFrom).seconds
            CloudKitClient.Metrics.throttleWait.increment(by: (until - pausedFrom).seconds)
            pausedUntil = until
        }
    }

    /// Every waiter looks again; those that still cannot go wait again. Few requests wait at a
    /// time (one per zone). A waiter that was cancelled leaves at the next wake-up, which always
    /// comes: while anyone waits, a request holds a slot or a drain is under way.
    private func wakeAll() {
        let woken = waiting
        waiting.removeAll()
        for waiter in woken { waiter.resume() }
    }
}
