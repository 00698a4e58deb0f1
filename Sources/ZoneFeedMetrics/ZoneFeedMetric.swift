/// Every metric zonefeed exports, with its help text: the names are the contract with dashboards
/// and alerts (docs/metrics.md). Labels stay low-cardinality: an outcome, a status, an HTTP
/// status code and the pipeline, never a zone or a record.
public struct ZoneFeedMetric: Sendable, Hashable {
    public let name: String
    public let help: String

    public static let lastSuccess = ZoneFeedMetric(
        "zonefeed_run_last_success_timestamp_seconds",
        "When the last successful run finished, in Unix seconds; a failed or interrupted run leaves it where it was.")
    public static let finished = ZoneFeedMetric("zonefeed_run_finished_timestamp_seconds", "When the last run finished, whatever its outcome, in Unix seconds.")
    public static let duration = ZoneFeedMetric("zonefeed_run_duration_seconds", "How long the last run took.")
    public static let status = ZoneFeedMetric(
        "zonefeed_run_status", "1 for the last run's status (succeeded, failed, interrupted or refused), 0 for the others.")
    public static let exitCode = ZoneFeedMetric("zonefeed_run_exit_code", "The exit code of the last run (README, \"Exit codes\").")
    public static let runID = ZoneFeedMetric("zonefeed_run_id", "The last run's run_id in zonefeed_runs (0 when it never started).")
    public static let records = ZoneFeedMetric(
        "zonefeed_records_total", "Records applied by the run, by outcome: upserted, tombstoned, rejected, skipped (unmapped type), swept (by a resync).")
    public static let pages = ZoneFeedMetric("zonefeed_pages_total", "Change pages applied by the run.")
    public static let resyncs = ZoneFeedMetric("zonefeed_resyncs_total", "Zones resynced from the beginning (expired change token, encrypted data reset).")
    public static let zones = ZoneFeedMetric(
        "zonefeed_zones_total", "Zones by outcome: applied, up_to_date, claimed_elsewhere (by another run), failed, deleted (at the source).")
    public static let zonesClaimed = ZoneFeedMetric(
        "zonefeed_zones_claimed",
        "Zones this process held the lock of in its last run (applied, up to date or failed); where processes share a pipeline, each pushes its own (metrics.instance), and a zone one finished may be claimed again by another and found up to date."
    )
    public static let peakMemory = ZoneFeedMetric(
        "zonefeed_process_peak_resident_memory_bytes",
        "The most memory the process has held resident (its peak RSS), in bytes: what a container's memory limit must allow.")
    public static let cloudKitRequests = ZoneFeedMetric(
        "zonefeed_cloudkit_requests_total", "CloudKit Web Services requests, retries included, by HTTP status (none: no response).")
    public static let cloudKitRetries = ZoneFeedMetric("zonefeed_cloudkit_retries_total", "CloudKit requests tried again after a retryable failure.")
    public static let misdirectedRetries = ZoneFeedMetric(
        "zonefeed_cloudkit_misdirected_retries_total",
        "CloudKit requests sent again on a fresh connection after a 421 Misdirected Request without CloudKit's body.")
    public static let throttleWait = ZoneFeedMetric(
        "zonefeed_cloudkit_throttle_wait_seconds_total", "Seconds requests were paused because CloudKit throttled (Retry-After).")

    public static let webAuthTokenRotated = ZoneFeedMetric(
        "zonefeed_web_auth_token_last_rotated_timestamp_seconds",
        "When the newest web auth token arrived (a sign-in, or a rotation on a CloudKit answer), in Unix seconds; absent when unknown.")
    public static let webAuthTokenSignedIn = ZoneFeedMetric(
        "zonefeed_web_auth_token_signed_in_timestamp_seconds",
        "When the person signed in with zonefeed login for the stored web auth token, in Unix seconds; absent for a token not obtained so.")

    public static let all: [ZoneFeedMetric] = [
        lastSuccess, finished, duration, status, exitCode, runID, records, pages, resyncs, zones, zonesClaimed, peakMemory, cloudKitRequests,
        cloudKitRetries, misdirectedRetries,
        throttleWait, webAuthTokenRotated, webAuthTokenSignedIn,
    ]

    /// The help text of a metric by name; a name not in the catalog gets none.
    static let helpByName: [String: String] = Dictionary(uniqueKeysWithValues: all.map { ($0.name, $0.help) })

    init(_ name: String, _ help: String) {
        self.name = name
        self.help = help
    }
}
