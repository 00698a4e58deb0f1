/// How many requests of one client are in flight at once, and when none may start.
///
/// - The limit starts at `maxConcurrent` and adapts (additive increase, multiplicative decrease,
///   as TCP does): each success adds `1 / limit`, so a full round of successes adds one; a
///   throttle brings it down, once per episode (the requests that were in flight with it are
///   answered by the same overload and do not lower it again): to half of what was in flight,
///   which may be less than the limit.
/// - A server that refuses more than a fixed number of requests in flight is found out: the
///   in-flight count of the lowest throttled request is a *ceiling* the limit stays under. It
///   probes the ceiling again only after a number of successes that doubles with every probe
///   the server throttles, and a throttled probe costs only its own wait, not a pause of every
///   request, so a run converges to the server's cap instead of paying a pause each time the
///   limit creeps above it. Probes that succeed lift the ceiling, three of them, each a
///   probe's wait apart, and each with no other request back while it was out: on a loaded
///   machine an answer can wait to be read long after the server let it go, so the client counts
///   in flight what the server no longer does, and one probe's success can be that miscount
///   (CI met it: a ceiling lifted, and five in flight at a server that takes two).
/// - A throttle whose `retryAfter` the request will wait out pauses every request of the client
///   until then, not only the one that got it, unless the server answered others meanwhile (it
///   refused one too many at once, which fewer in flight cures); one the request will not wait
///   (it gives up: the wait exceeds its retry budget) pauses nobody. `throttledSeconds` is the
///   time paused so far, never more than has passed.
/// - `oneAtATime` is for servers that accept only the newest web auth token or two: once set,
///   the limit is one for good.
actor RequestLimiter {
    let maxConcurrent: Int
    private(set) var limit: Double
    private(set) var oneAtATime: Bool
    private(set) var inFlight = 0
    private(set) var peakInFlight = 0
    /// The most in flight since the limit last came down.
    private var highWater = 0
    /// Requests that succeeded so far.
    private var successes = 0
    /// Requests that came back so far, however they went.
    private var returns = 0
    /// The fewest requests in flight that the server throttled; nil when none was or a request
    /// succeeded at that level since.
    private(set) var ceiling: Int?
    /// Successes at or under the ceiling before the next probe above it.
    private(set) var successesBeforeProbe = RequestLimiter.firstProbeAfter
    /// Probes at the ceiling that succeeded since it was set or last refused a probe.
    private(set) var probesSucceeded = 0
    private var pausedUntil: ContinuousClock.Instant?
    private var pause = PauseClock()
    /// Bumped by every decrease: a ticket from an earlier episode does not decrease again.
    private var episode = 0
    /// Requests waiting for the others to finish (`drain`); no new request starts meanwhile.
    private var draining = 0
    private var waiting: [CheckedContinuation<Void, Never>] = []
    /// How many requests (or drains) wait for a slot now: what a test waits for before it
    /// frees one.
    var waiters: Int { waiting.count }

    static let firstProbeAfter = 16
    static let probesToLift = 3
    static let lastProbeAfter = 4_096
    /// No pause, whatever a server asks, is longer than this: the caller caps `retryAfter` well
    /// below it (`maxRetryAfter`); this only keeps the arithmetic from ever trapping.
    static let longestPause = Duration.seconds(86_400)

    struct Ticket: Sendable {
        let episode: Int
        /// Requests in flight when this one started, itself included.
        let inFlight: Int
        /// Successes before this one started.
        let successes: Int
        /// Returns before this one started.
        let returns: Int
    }

    enum Outcome: Sendable {
        case succeeded
        /// Throttled. `pause`: the server's `retryAfter` in seconds when the request will wait it
        /// out (every request then waits with it); nil when it gave none, or the request gives up.
        case throttled(pause: Double?)
        case failed
    }

    init(maxConcurrent: Int, oneAtATime: Bool = false) {
        self.maxConcurrent = max(1, maxConcurrent)
        self.oneAtATime = oneAtATime
        limit = Double(self.maxConcurrent)
    }

    /// How many requests may be in flight now.
    var currentLimit: Int { oneAtATime ? 1 : max(1, Int(limit)) }

    /// Seconds every request was paused because the server throttled: the pauses so far, and of
    /// one under way the part that has passed.
    var throttledSeconds: Double { pause.seconds(at: .now) }

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
                highWater = max(highWater, inFlight)
                return Ticket(episode: episode, inFlight: inFlight, successes: successes, returns: returns)
            }
            await withCheckedContinuation { waiting.append($0) }
        }
    }

    /// Gives the slot back and learns from how the request went. Returns whether requests go
    /// one at a time.
    @discardableResult
    func release(_ ticket: Ticket, _ outcome: Outcome) -> Bool {
        inFlight -= 1
        defer { returns += 1 }
        switch outcome {
        case .succeeded:
            succeeded(ticket)
        case .throttled(let seconds):
            if throttled(ticket), let seconds, seconds > 0 { pauseAll(for: seconds) }
        case .failed:
            break
        }
        wakeAll()
        return oneAtATime
    }

    private func succeeded(_ ticket: Ticket) {
        successes += 1
        guard let ceiling else {
            limit = min(Double(maxConcurrent), limit + 1 / limit)
            return
        }
        if ticket.inFlight >= ceiling {
            // A probe got through; counted only when nothing came back while it was out.
            if returns == ticket.returns { probesSucceeded += 1 }
            successesBeforeProbe = Self.firstProbeAfter
            if probesSucceeded >= Self.probesToLift {
                // The server took as many as it once refused, again and again: what refused
                // them has passed.
                self.ceiling = nil
                probesSucceeded = 0
                limit = min(Double(maxConcurrent), limit + 1 / limit)
            } else {
                limit = min(limit, Double(ceiling - 1))
            }
            return
        }
        // Under the ceiling the limit grows up to just below it; one over it, a probe, only
        // once enough requests went well since the last throttle.
        successesBeforeProbe -= 1
        let top = Double(successesBeforeProbe <= 0 ? ceiling : ceiling - 1)
        limit = min(Double(maxConcurrent), top, limit + 1 / limit)
    }

    /// Lowers the limit after a throttle. Returns whether the throttle concerns every request:
    /// not when the server answered others while this request was out (it refused one too many
    /// at once, not everyone: fewer in flight is the cure, and this request waits alone), nor
    /// for a request sent before the limit last came down (an answer to the same overload), nor
    /// for a probe above a known ceiling (refused as expected).
    private func throttled(_ ticket: Ticket) -> Bool {
        guard ticket.episode == episode else {
            // Answered by the overload already met; when that one showed a ceiling, this says
            // how many were too many as well.
            // (Only when the server took another while it refused this one: everyone refused
            // is an overload, not a cap.)
            if let ceiling, ticket.inFlight >= 2, ticket.inFlight < ceiling, successes > ticket.successes {
                self.ceiling = ticket.inFlight
                probesSucceeded = 0
                limit = min(limit, Double(ticket.inFlight - 1))
            }
            return false
        }
        if let ceiling, ticket.inFlight >= ceiling {
            limit = min(limit, Double(max(1, ceiling - 1)))
            probesSucceeded = 0
            successesBeforeProbe = min(Self.lastProbeAfter, max(Self.firstProbeAfter, successesBeforeProbe) * 2)
            return false
        }
        // Half of what was in flight: with four zones fetched, a limit of 16 halved is 8, still
        // more than the four that overloaded the server.
        limit = max(1, min(limit, Double(highWater)) / 2)
        episode += 1
        highWater = inFlight
        // A request refused while it had company: the server takes fewer than that at once.
        // (One refused alone says nothing of how many it takes.) A request sent first can reach
        // the server after the others (streams of one HTTP/2 connection still opening) and be
        // the one refused: then the company it had is the others still out when it came back.
        let company = ticket.inFlight >= 2 ? ticket.inFlight : inFlight + 1
        if company >= 2 {
            let refusedAt = min(ceiling ?? company, company)
            ceiling = refusedAt
            probesSucceeded = 0
            limit = min(limit, Double(refusedAt - 1))
        }
        successesBeforeProbe = Self.firstProbeAfter
        return successes == ticket.successes
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
    private func pauseAll(for seconds: Double) {
        let now = ContinuousClock.now
        let until = now + Duration.bounded(seconds: seconds, atMost: Self.longestPause)
        guard until > pausedUntil ?? now else { return }
        // Every pause announced before ends before `until`: counted whole either side.
        let announced = pause.seconds(at: until)
        pause.add(from: now, until: until)
        pausedUntil = until
        // The metric counts a pause as it is announced (a counter cannot be taken back later);
        // a pause is announced only when the request that met it waits it out.
        CloudKitClient.Metrics.throttleWait.increment(by: pause.seconds(at: until) - announced)
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

/// The time covered by pauses that may overlap, counted once, and never beyond the moment asked
/// about: a pause cut short (the run ended, or failed) counts only what passed of it.
struct PauseClock: Sendable {
    /// The length of the pauses that ended before `openFrom`.
    private var closed: Duration = .zero
    /// The pause under way or last: from `openFrom` until `openUntil`.
    private var openFrom: ContinuousClock.Instant?
    private var openUntil: ContinuousClock.Instant?

    mutating func add(from start: ContinuousClock.Instant, until end: ContinuousClock.Instant) {
        guard end > start else { return }
        if let from = openFrom, let until = openUntil {
            if start <= until {
                // Overlaps or follows on: one pause, longer.
                openUntil = max(until, end)
                openFrom = min(from, start)
                return
            }
            closed += until - from
        }
        openFrom = start
        openUntil = end
    }

    func seconds(at now: ContinuousClock.Instant) -> Double {
        var total = closed
        if let from = openFrom, let until = openUntil, now > from { total += min(until, now) - from }
        return total.seconds
    }
}
