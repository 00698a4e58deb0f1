import CoreMetrics

extension CloudKitClient {
    /// What the client counts, through swift-metrics: nothing is recorded until the program
    /// bootstraps a metrics backend (zonefeed's is Prometheus; README, "Metrics"). Labels stay
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
    }
}
