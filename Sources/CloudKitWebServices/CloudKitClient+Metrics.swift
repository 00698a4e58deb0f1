import CoreMetrics

extension CloudKitClient {
    /// What the client counts, through swift-metrics: nothing is recorded until the program
    /// bootstraps a metrics backend (zonefeed's is Prometheus; docs/metrics.md). Labels stay
    /// few: an HTTP status, never a zone or a record.
    enum Metrics {
        /// Every HTTP exchange, retries included, by status code ("none" when no response came).
        static func requests(status: String) -> Counter {
            Counter(label: "zonefeed_cloudkit_requests_total", dimensions: [("status", status)])
        }
        /// Attempts made again after a retryable failure.
        static let retries = Counter(label: "zonefeed_cloudkit_retries_total")
        /// Requests sent again on a fresh connection after a 421 Misdirected Request.
        static let misdirectedRetries = Counter(label: "zonefeed_cloudkit_misdirected_retries_total")
        /// Seconds every request was paused because the server throttled.
        static let throttleWait = FloatingPointCounter(label: "zonefeed_cloudkit_throttle_wait_seconds_total")
        /// When the newest web auth token arrived (a sign-in or a rotation), Unix seconds: a
        /// token that stops rotating is a session that has ended, or runs that have stopped.
        static func webAuthTokenRotated() -> Gauge { Gauge(label: "zonefeed_web_auth_token_last_rotated_timestamp_seconds") }
        /// When the person signed in (`zonefeed login`), Unix seconds: CloudKit counts a
        /// session's two weeks (or 30 minutes) from here, however often its token rotates.
        static func webAuthTokenSignedIn() -> Gauge { Gauge(label: "zonefeed_web_auth_token_signed_in_timestamp_seconds") }
    }
}
