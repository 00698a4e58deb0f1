import FakeCloudKit
import Foundation
import Hummingbird
import Logging

/// A fake CloudKit Web Services server on loopback: the endpoints zonefeed's REST client uses
/// (`records/changes`, `changes/database`, `zones/list`, `users/caller`) with CloudKit's JSON
/// shapes, web auth token rotation and error bodies, serving the fake generator's feed (or a
/// scenario file, see `Scenario`), plus admin endpoints (see `FakeCloudKitStore+Admin.swift`)
/// that let a test add changes, delete or purge zones, expire tokens and inject faults.
///
/// ```swift
/// try await FakeCloudKitServer.run(.init(settings: FakeSettings(zones: 2, recordsPerZone: 500)), logger: logger) { port in
///     // http://127.0.0.1:\(port)/database/1/iCloud.com.example.fake/development/private/records/changes
/// }
/// ```
///
/// Requests go to `/database/1/{container}/{environment}/{database}/{operation}` with the
/// `ckAPIToken` and `ckWebAuthToken` query parameters, form-decoded as a real server would (so a
/// `+` that is not sent as `%2B` becomes a space and the token is refused).
public struct FakeCloudKitServer: Sendable {
    public struct Configuration: Sendable {
        public var host: String
        /// 0 picks a free port; `onReady` tells which.
        public var port: Int
        public var container: String
        public var environment: String
        /// The generator's settings; the zones are in the private database, owned by `settings.owner`.
        public var settings: FakeSettings
        /// A scenario file used instead of the generator (see `Scenario`).
        public var scenarioFile: String?
        /// What `users/caller` answers (an admin call can change it).
        public var userRecordName: String
        /// The API token every request must carry as `ckAPIToken`.
        public var apiToken: String
        /// The web auth tokens accepted from the start, until `/admin/auth/revoke` revokes them
        /// (or, with a `tokenWindow`, until a rotated token has been used). The tokens the server
        /// issues (one per response, in `X-Apple-CloudKit-Web-Auth-Token`) are accepted too.
        public var webAuthTokens: [String]
        /// How many of the tokens the server issued it still accepts, and the configured tokens
        /// only until a rotated one has been used. nil accepts every token it ever issued, as
        /// one live test found the real service does.
        public var tokenWindow: Int?
        /// When a token leaves the window (Apple: "every response carries a new token, and the
        /// previous one becomes invalid", which reads both ways).
        public var tokenRetirement: TokenRetirement

        public enum TokenRetirement: String, Sendable, CaseIterable {
            /// A token is accepted until `tokenWindow` tokens issued after it... have been *used*:
            /// the N ending with the newest token used, and any issued after that. A client that
            /// saves each token before it uses it survives being killed at any moment.
            case onUse = "use"
            /// ...have been *issued*: only the newest N. A response lost with a killed client
            /// takes a place in the window, so with a window of 1 no client survives being killed
            /// during a request, and with 2 not two such kills in a row (README).
            case onIssue = "issue"
        }
        /// Every CloudKit response waits `latency`, give or take up to `jitter` (uniformly), as a
        /// server 50-300 ms away answers.
        public var latency: Duration
        public var jitter: Duration
        /// More CloudKit requests than this in flight at once: each one beyond is answered 429
        /// `THROTTLED` with `retryAfter` `throttleRetryAfter` seconds. nil: no limit.
        public var maxInFlight: Int?
        public var throttleRetryAfter: Double
        /// The `redirectURL` of a 421 `AUTHENTICATION_REQUIRED`; nil: the server's own sign-in
        /// page (`signIn`), at the address the client reached the server by.
        public var redirectURL: String?
        /// The sign-in page and the sessions' lifetimes.
        public var signIn = SignIn()
        /// Render each zone's pages from a nil token (200 records a page) before listening, and
        /// answer those requests from memory: a backfill then costs the server little more than
        /// sending bytes, as a remote CloudKit costs the client's machine nothing. The pages take
        /// memory in proportion to the feed; any admin change drops them.
        public var preparesPages: Bool

        public init(
            host: String = "127.0.0.1", port: Int = 0, container: String = "iCloud.com.example.fake",
            environment: String = "development", settings: FakeSettings = FakeSettings(), scenarioFile: String? = nil,
            userRecordName: String = "_fakeUser", apiToken: String = "fake-api-token",
            webAuthTokens: [String] = ["fake-web-auth-token"],
            redirectURL: String? = nil,
            preparesPages: Bool = false, tokenWindow: Int? = nil, tokenRetirement: TokenRetirement = .onUse,
            latency: Duration = .zero, jitter: Duration = .zero,
            maxInFlight: Int? = nil, throttleRetryAfter: Double = 0.25
        ) {
            self.host = host
            self.port = port
            self.container = container
            self.environment = environment
            self.settings = settings
            self.scenarioFile = scenarioFile
            self.userRecordName = userRecordName
            self.apiToken = apiToken
            self.webAuthTokens = webAuthTokens
            self.redirectURL = redirectURL
            self.preparesPages = preparesPages
            self.tokenWindow = tokenWindow
            self.tokenRetirement = tokenRetirement
            self.latency = latency
            self.jitter = jitter
            self.maxInFlight = maxInFlight
            self.throttleRetryAfter = throttleRetryAfter
        }
    }

    /// The server as a Hummingbird application, for a caller that runs it in its own
    /// `ServiceGroup`. `onReady` is called with the bound port once the server listens.
    /// Throws when the scenario file cannot be read.
    public static func makeApplication(
        _ configuration: Configuration, logger: Logger, onReady: @escaping @Sendable (Int) async -> Void
    ) async throws -> some ApplicationProtocol {
        let store = try await FakeCloudKitStore(configuration: configuration)
        if configuration.preparesPages {
            let started = ContinuousClock.now
            let prepared = await store.preparePages()
            logger.notice(
                "prepared the pages of a backfill",
                metadata: [
                    "pages": "\(prepared.pages)", "bytes": "\(prepared.bytes)",
                    "seconds": "\(String(format: "%.1f", (ContinuousClock.now - started).seconds))",
                ])
        }
        return Application(
            responder: FakeCloudKitResponder(store: store),
            configuration: ApplicationConfiguration(
                address: .hostname(configuration.host, port: configuration.port), serverName: "AppleHttpServer/fake"),
            onServerRunning: { channel in await onReady(channel.localAddress?.port ?? configuration.port) },
            logger: logger)
    }

    /// Runs the server until the calling task is cancelled; `onReady` gets the bound port (the
    /// real one when the configuration asks for port 0).
    ///
    /// Cancellation stops the server at once, cutting open connections; HummingbirdCore logs
    /// that at error level ("Waiting on child channel: CancellationError()"), so a test passes a
    /// logger set to `.critical`. For a graceful stop, run `makeApplication`'s result in a
    /// `ServiceGroup` and trigger its graceful shutdown (`runFromCommandLine` does so on signals).
    public static func run(
        _ configuration: Configuration, logger: Logger, onReady: @escaping @Sendable (Int) async -> Void
    ) async throws {
        try await makeApplication(configuration, logger: logger, onReady: onReady).run()
    }

    /// `zonefeed fake-server`: prints one line to stdout when the server listens, then serves
    /// until SIGINT or SIGTERM.
    public static func runFromCommandLine(_ configuration: Configuration, logger: Logger) async throws {
        let app = try await makeApplication(configuration, logger: logger) { port in
            let line =
                "fake CloudKit server listening on http://\(configuration.host):\(port) "
                + "(container \(configuration.container), environment \(configuration.environment))\n"
            // Unbuffered, so that a parent process reading a pipe sees the line at once.
            FileHandle.standardOutput.write(Data(line.utf8))
        }
        try await app.runService()
    }
}
