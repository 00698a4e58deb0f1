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

    public enum Environment: String, Sendable, CaseIterable { case development, production }
    public enum TokenStore: String, Sendable, CaseIterable { case file, database }
    public enum Database: String, Sendable, CaseIterable { case `private`, shared }

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
        /// Server-to-server signing: the key ID from CloudKit Dashboard and a PEM private key file.
        public var serverKeyID: String?
        public var serverPrivateKeyFile: String?

        public init(
            apiToken: Secret? = nil, webAuthToken: Secret? = nil, webAuthTokenFile: String? = nil,
            serverKeyID: String? = nil, serverPrivateKeyFile: String? = nil
        ) {
            self.apiToken = apiToken
            self.webAuthToken = webAuthToken
            self.webAuthTokenFile = webAuthTokenFile
            self.serverKeyID = serverKeyID
            self.serverPrivateKeyFile = serverPrivateKeyFile
        }
    }

    public init(container: String, auth: Auth) {
        self.container = container
        self.auth = auth
    }
}
