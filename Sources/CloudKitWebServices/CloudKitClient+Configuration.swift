import NIOCore

extension CloudKitClient {
    /// Where requests go and how they authenticate, as a value with defaults:
    ///
    ///     var configuration = CloudKitClient.Configuration(container: "iCloud.com.example.notes")
    ///     configuration.apiToken = apiToken
    ///     configuration.webAuthTokenFile = ".zonefeed/notes.web-auth-token"
    public struct Configuration: Sendable, CustomStringConvertible {
        public enum Environment: String, Sendable, CaseIterable { case development, production }
        public enum Database: String, Sendable, CaseIterable { case `public`, `private`, shared }

        /// The server; a fake server's `http://127.0.0.1:PORT` in tests.
        public var baseURL: String = "https://api.apple-cloudkit.com"
        /// `iCloud.…`.
        public var container: String
        public var environment: Environment = .production
        public var database: Database = .private
        /// The container's API token from CloudKit Dashboard (`ckAPIToken`).
        public var apiToken: String?
        /// The user's web auth token (`ckWebAuthToken`); a newer one in `webAuthTokenFile` wins.
        public var webAuthToken: String?
        /// Where the newest web auth token is kept (mode 0600, replaced atomically).
        public var webAuthTokenFile: String?
        /// Where the newest web auth token is kept when not in a file (a database table, say);
        /// when set, `webAuthTokenFile` is not used.
        public var webAuthTokenVault: (any WebAuthTokenVault)?
        /// The certificate authorities trusted for TLS: the system's, plus a `caFile`'s.
        public var tlsTrust: TLSTrust = .system
        /// Server-to-server signing (public database only, per Apple).
        public var serverKey: ServerKey?
        /// How long one HTTP request may take, from sending it to the last byte of its answer.
        public var timeout: Duration = .seconds(60)
        /// How long the answer may go without a byte arriving, head or body (a stalled
        /// connection is given up on before `timeout` when this is shorter).
        public var idleTimeout: Duration = .seconds(30)
        /// The longest wait a server's `retryAfter` (or `Retry-After`) is honoured for: a longer
        /// one counts as this. A wait that does not fit in what is left of the retry budget is
        /// not waited at all: the request fails at once and pauses no other.
        public var maxRetryAfter: Duration = .seconds(300)
        public var retry: RetryPolicy = RetryPolicy()
        /// The most requests in flight at once; throttling lowers it for a while, and a server
        /// that accepts only the newest web auth token brings it down to one.
        public var maxConcurrentRequests: Int = 16
        /// The largest response body read; a larger one fails with `responseTooLarge`.
        public var maxResponseBytes: Int = 32 * 1024 * 1024
        /// How `maxResponseBytes` is set where this client is configured from a file, for the
        /// sentence that says how to raise it (`source.cloudkit.maxResponseBytes`).
        public var maxResponseBytesSetting = "maxResponseBytes"

        public init(
            container: String, environment: Environment = .production, database: Database = .private,
            baseURL: String = "https://api.apple-cloudkit.com"
        ) {
            self.container = container
            self.environment = environment
            self.database = database
            self.baseURL = baseURL
        }

        public var description: String {
            "CloudKitClient.Configuration(baseURL: \(baseURL), container: \(container), environment: \(environment.rawValue), "
                + "database: \(database.rawValue), apiToken: \(apiToken == nil ? "nil" : "<redacted>"), "
                + "webAuthToken: \(webAuthToken == nil ? "nil" : "<redacted>"), webAuthTokens: \(webAuthTokenVault?.location ?? webAuthTokenFile ?? "nil"), "
                + "serverKey: \(serverKey.map { "\($0)" } ?? "nil"), tls: \(tlsTrust), maxConcurrentRequests: \(maxConcurrentRequests))"
        }
    }
}

/// Exponential backoff with full jitter (AWS's "Exponential Backoff And Jitter"), bounded both by
/// a number of attempts and by a time budget.
public struct RetryPolicy: Sendable, Hashable {
    /// Attempts per request, the first one included.
    public var maxAttempts: Int = 8
    /// Wall-clock time from the start of the first attempt after which no new attempt starts.
    public var budget: Duration = .seconds(300)
    /// The backoff before the second attempt; it doubles with every further attempt...
    public var baseDelay: Duration = .milliseconds(500)
    /// ...up to this.
    public var maxDelay: Duration = .seconds(30)
    /// Full jitter: wait a random time between zero and the backoff. Off for predictable tests.
    public var jitter: Bool = true

    public init(
        maxAttempts: Int = 8, budget: Duration = .seconds(300), baseDelay: Duration = .milliseconds(500),
        maxDelay: Duration = .seconds(30), jitter: Bool = true
    ) {
        self.maxAttempts = maxAttempts
        self.budget = budget
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
        self.jitter = jitter
    }

    /// One attempt and no retry.
    public static let none = RetryPolicy(maxAttempts: 1)

    /// The wait after failed attempt number `attempt` (1-based). A server's `retryAfter` is a
    /// floor: the client never comes back sooner than it was asked to.
    public func delay(afterAttempt attempt: Int, retryAfter: Double?) -> Duration {
        let exponent = min(max(attempt - 1, 0), 30)
        let ceiling = min(maxDelay.seconds, baseDelay.seconds * Double(1 << exponent))
        let backoff = jitter ? Double.random(in: 0...max(ceiling, 0)) : ceiling
        return .bounded(seconds: max(backoff, retryAfter ?? 0), atMost: .seconds(86_400))
    }
}

extension Duration {
    /// `seconds` as a Duration, rounded up to the millisecond, within `0...atMost`: a number
    /// from a server (or anywhere else outside) never traps a conversion, whatever it is
    /// (NaN and negatives count as zero, infinity as `atMost`).
    static func bounded(seconds: Double, atMost: Duration) -> Duration {
        guard seconds > 0 else { return .zero }
        guard seconds < atMost.seconds else { return atMost }
        return .milliseconds(Int64((seconds * 1000).rounded(.up)))
    }

    /// As NIO's `TimeAmount`, for AsyncHTTPClient; at most a day.
    var timeAmount: TimeAmount {
        .milliseconds(Int64(Duration.bounded(seconds: seconds, atMost: .seconds(86_400)).seconds * 1000))
    }
}
