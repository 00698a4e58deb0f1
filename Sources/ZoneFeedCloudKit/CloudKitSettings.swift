import CloudKitWebServices
import ZoneFeed

/// The `source.cloudkit` section: which container, database and zones to read, how to sign in,
/// and how hard to press the server.
public struct CloudKitSettings: Sendable {
    public var baseURL: String = "https://api.apple-cloudkit.com"
    public var container: String
    public var environment: Environment = .production
    public var database: Database = .private
    public var zones: ZoneSelection = .all
    /// 1...200.
    public var resultsLimit: Int = 200
    /// Only these fields are fetched; nil fetches every field.
    public var desiredKeys: [String]?
    public var auth: Auth
    /// Seconds one HTTP request may take, from sending it to the last byte of its answer.
    public var timeoutSeconds: Double = 60
    /// Seconds an answer may go without a byte arriving.
    public var idleTimeoutSeconds: Double = 30
    /// The longest a server's `retryAfter` is waited for (a longer one counts as this); a wait
    /// beyond what is left of `retryBudgetSeconds` fails the request at once instead.
    public var maxRetryAfterSeconds: Double = 300
    /// The largest answer read, in bytes; a page of 200 records is a few hundred kilobytes.
    public var maxResponseBytes: Int = 32 * 1024 * 1024
    /// Retries of throttled or failed requests: at most this many attempts per request...
    public var maxAttempts: Int = 8
    /// ...and no new attempt more than this many seconds after the first one, per request.
    public var retryBudgetSeconds: Double = 300
    /// The most requests in flight at once, across zones; each zone's pages still come one after
    /// another. 16 keeps a backfill 100 ms from CloudKit well past eight times what one request
    /// at a time can fetch (docs/performance.md).
    public var maxConcurrentRequests: Int = 16
    /// `tls.caFile`: a PEM file of CA certificates trusted besides the system's (a TLS-inspecting
    /// proxy's CA, a test server's). Certificates are always verified.
    public var tlsCAFile: String?
    /// How far before its watermark a zone read by query is read again each run: CloudKit
    /// updates its query indexes asynchronously, so a record can appear after one modified
    /// later. Five minutes: indexes are observed to catch up within seconds, and a record
    /// that is late by more than the lag is missed until it is modified again or swept.
    /// What it costs: the records modified in the lag before the watermark are fetched again
    /// each run (and counted unchanged).
    public var queryLagSeconds: Double = 300
    /// How often a zone read by query lists its records to find deletions.
    public var deletionSweep: DeletionSweep = .interval(seconds: 86_400)

    /// A zone read by query finds deletions by listing every record name of each type
    /// (`resultsLimit` names a request: 500 requests per 100,000 records at 200) and
    /// tombstoning the rows it did not list.
    public enum DeletionSweep: Sendable, Hashable, CustomStringConvertible {
        case never
        /// At the end of the first run this long after the last sweep began.
        case interval(seconds: Double)
        /// In every `runs`th run.
        case everyRuns(Int)

        public var description: String {
            switch self {
            case .never: "never"
            case .interval(let seconds): "every \(CloudKitSettings.durationText(seconds))"
            case .everyRuns(let runs): runs == 1 ? "every run" : "every \(runs) runs"
            }
        }
    }

    // The ranges of the numbers above (docs/pipeline-file.md): a file out of range is
    // refused at its line, and nothing behind them can overflow.

    /// CloudKit's own limit for `resultsLimit`.
    public static let resultsLimitRange = 1...200
    /// A millisecond to an hour: no page takes an hour to arrive.
    public static let timeoutSecondsRange = 0.001...3_600.0
    /// Enough for a throttled day; a budget ends the retries before this does.
    public static let maxAttemptsRange = 1...100
    /// Up to a day of waiting per request.
    public static let retryBudgetSecondsRange = 0.0...86_400.0
    public static let maxConcurrentRequestsRange = 1...256
    /// A tenth of a second (a loopback test) to an hour.
    public static let idleTimeoutSecondsRange = 0.1...3_600.0
    /// Up to a day: a server asking for longer is not waited for anyway (the budget).
    public static let maxRetryAfterSecondsRange = 0.0...86_400.0
    /// 64 KiB (a page of small records) to 1 GiB.
    public static let maxResponseBytesRange = 65_536...1_073_741_824
    /// Up to a day: a lag is seconds in practice, and the whole lag is read again each run.
    public static let queryLagSecondsRange = 0.0...86_400.0
    /// A sweep at most once a minute, at least once a year; at most every 100,000 runs.
    public static let deletionSweepSecondsRange = 60.0...31_536_000.0
    public static let deletionSweepRunsRange = 1...100_000

    /// A time as the file writes it: `90s`, `5m`, `24h`, `7d`, in the largest unit it is whole in.
    public static func durationText(_ seconds: Double) -> String {
        for (unit, size) in [("d", 86_400.0), ("h", 3_600.0), ("m", 60.0)] where seconds >= size && seconds.truncatingRemainder(dividingBy: size) == 0 {
            return "\(Int(seconds / size))\(unit)"
        }
        return seconds == seconds.rounded() ? "\(Int(seconds))s" : "\(seconds)s"
    }

    public enum Environment: String, Sendable, CaseIterable { case development, production }
    public enum TokenStore: String, Sendable, CaseIterable { case file, database }
    public enum Database: String, Sendable, CaseIterable { case `private`, shared, `public` }

    public struct Auth: Sendable {
        public var apiToken: Secret?
        public var webAuthToken: Secret?
        /// Where the rotated web auth token is kept between runs (mode 0600); when the file
        /// does not name one, `.zonefeed/<pipeline>.web-auth-token`.
        public var webAuthTokenFile: String?
        /// Whether `webAuthTokenFile` is the default rather than the file's.
        public var webAuthTokenFileIsDefault = false
        /// Where rotated tokens are kept: the file (the default), or the destination database,
        /// for runs whose disk does not outlive them (a CronJob's pod, a fleet of workers).
        public var webAuthTokenStore: TokenStore = .file
        /// `serverKey`: server-to-server signing, for the public database; read (and its key
        /// parsed) with the file.
        public var serverKey: ServerKey?
        /// Where the server key's PEM was read from: a file's path, or `privateKey` (a variable).
        public var serverKeySource: String?

        public init(
            apiToken: Secret? = nil, webAuthToken: Secret? = nil, webAuthTokenFile: String? = nil, serverKey: ServerKey? = nil,
            serverKeySource: String? = nil
        ) {
            self.apiToken = apiToken
            self.webAuthToken = webAuthToken
            self.webAuthTokenFile = webAuthTokenFile
            self.serverKey = serverKey
            self.serverKeySource = serverKeySource
        }
    }

    public init(container: String, auth: Auth) {
        self.container = container
        self.auth = auth
    }
}
