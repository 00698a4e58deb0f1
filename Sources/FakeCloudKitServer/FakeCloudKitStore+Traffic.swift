import Foundation
import ZoneFeed

/// Traffic: how many CloudKit requests are in flight, how they overlapped, which were one too
/// many (`--max-in-flight`), and each round trip's latency.
extension FakeCloudKitStore {
    /// How the CloudKit requests overlapped, for `GET /admin/state` (`stats/reset` starts over).
    struct Traffic {
        /// CloudKit requests being answered now, the latency included.
        var inFlight = 0
        var peakInFlight = 0
        /// Requests that arrived while another was in flight.
        var overlapped = 0
        var requests = 0
        /// Requests answered 429 because more than `maxInFlight` were in flight.
        var throttled = 0
        /// The most in flight at an arrival once the first of those 429s' `retryAfter` has
        /// passed: a client that pauses as asked sends nothing sooner, and the requests it had
        /// already sent are not counted.
        var peakInFlightAfterThrottle: Int?
        /// In flight among the requests that arrived once that `retryAfter` had passed.
        var inFlightAfterThrottle = 0
        var firstThrottle: ContinuousClock.Instant?
        /// With a token window: the position of the first token issued after the first throttle.
        var firstThrottleTokenPosition: Int?
        /// Requests refused because their web auth token was one the server had issued (or
        /// been configured with) but no longer accepts.
        var staleTokenRefusals = 0
        /// Connections (TCP, whatever the HTTP version) that carried CloudKit requests.
        var connections = 0
        /// Requests answered 421 Misdirected Request by `faults/misdirect`.
        var misdirected = 0
        /// The bytes of the answers' bodies: the JSON a client decodes.
        var bodyBytes = 0
        /// The record names `records/lookup` was asked for.
        var lookedUp = 0
    }

    /// A CloudKit request arrives: counts it in flight. Returns whether it is one too many
    /// (`maxInFlight`), to be throttled, and its round trip's latency, give or take the jitter.
    /// `afterThrottle` is the request's to hand back to `depart`; `gate`, the gate that keeps it
    /// (`faults/gate`), if one does.
    func arrive(webAuthToken: String? = nil, path: String) -> (tooMany: Bool, latency: Duration, afterThrottle: Bool, gate: Gate.Arrival?) {
        let (tooMany, afterThrottle) = countArrival(webAuthToken: webAuthToken)
        return (tooMany, latency(), afterThrottle, arriveAtGate(path: path))
    }

    private func countArrival(webAuthToken: String?) -> (tooMany: Bool, afterThrottle: Bool) {
        traffic.requests += 1
        if traffic.inFlight > 0 { traffic.overlapped += 1 }
        traffic.inFlight += 1
        traffic.peakInFlight = max(traffic.peakInFlight, traffic.inFlight)
        var afterThrottle = false
        // Only requests sent once the pause was over count: one sent before it and still being
        // answered (a slow, loaded server) says nothing of how the client paused. With a token
        // window, a request that carries a token issued before the first throttle was sent
        // before any answer after it: one of the first wave, arriving late (the streams of one
        // HTTP/2 connection on a loaded machine), however late.
        let sentBefore = webAuthToken.flatMap { tokenPositions[$0] }.map { $0 < traffic.firstThrottleTokenPosition ?? Int.max } ?? false
        if let first = traffic.firstThrottle, ContinuousClock.now - first >= Duration(clampingSeconds: configuration.throttleRetryAfter), !sentBefore {
            afterThrottle = true
            traffic.inFlightAfterThrottle += 1
            traffic.peakInFlightAfterThrottle = max(traffic.peakInFlightAfterThrottle ?? 0, traffic.inFlightAfterThrottle)
        }
        guard let limit = configuration.maxInFlight, traffic.inFlight > limit else { return (false, afterThrottle) }
        traffic.throttled += 1
        if traffic.firstThrottle == nil {
            traffic.firstThrottle = .now
            traffic.firstThrottleTokenPosition = nextTokenPosition
        }
        return (true, afterThrottle)
    }

    /// The request's response is on its way.
    func depart(afterThrottle: Bool, bodyBytes: Int = 0) {
        traffic.bodyBytes += bodyBytes
        traffic.inFlight -= 1
        if afterThrottle, traffic.inFlightAfterThrottle > 0 { traffic.inFlightAfterThrottle -= 1 }  // 0 after stats/reset
    }

    /// The latency of one round trip: `latency`, give or take up to `jitter`.
    func latency() -> Duration {
        var latency = configuration.latency
        if configuration.jitter > .zero {
            let jitter = configuration.jitter.seconds
            latency += Duration(clampingSeconds: Double.random(in: -jitter...jitter))
        }
        return max(latency, .zero)
    }
}
