import FakeCloudKit
import Foundation
import Hummingbird
import HummingbirdCore
import HummingbirdHTTP2
import HummingbirdTLS
import Logging
import NIOSSL
import ServiceLifecycle

/// A fake CloudKit Web Services server on loopback: the endpoints zonefeed's REST client uses
/// (`records/changes`, `changes/database`, `zones/list`, `users/caller`) with CloudKit's JSON
/// shapes, web auth token rotation and error bodies, serving the fake generator's feed (or a
/// scenario file, see `Scenario`), plus admin endpoints (see `FakeCloudKitStore+Admin.swift`)
/// that let a test add changes, delete or purge zones, expire tokens and inject faults.
///
/// ```swift
/// try await FakeCloudKitServer.run(.init(settings: FakeSettings(zones: 2, recordsPerZone: 500)), logger: logger) { listening in
///     // http://127.0.0.1:\(listening.port)/database/1/iCloud.com.example.fake/development/private/records/changes
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
            /// during a request, and with 2 not two such kills in a row (docs/cloudkit.md, "Web auth tokens").
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
        /// HTTPS with this certificate and key; nil serves plain HTTP/1.1.
        public var tls: TLSIdentity?
        /// What ALPN offers over TLS: HTTP/2, HTTP/1.1 or both (CloudKit's edge negotiates h2).
        public var httpVersions: HTTPVersions
        /// The web courier's port (0 picks a free one): the courier is an origin of its own, as
        /// Apple's courier host is, and each origin answers 421 to the other's paths.
        public var courierPort: Int
        /// How many generated records the public database's `_defaultZone` holds (read with
        /// `records/query`); 0: none until added.
        public var publicRecords: Int
        /// How long an added entry (a new version, a deletion) stays unseen by queries, in
        /// milliseconds, drawn for each entry from this range: CloudKit updates its query
        /// indexes asynchronously, so records appear late and out of modification order.
        public var indexLag: ClosedRange<Int>
        /// The server-to-server keys CloudKit Dashboard knows: key ID → the public key's PEM
        /// (`zonefeed key create` prints it). A request signed with one reaches the public
        /// database (`FakeCloudKitStore+ServerKeys`).
        public var serverKeys: [String: String]
        /// Seconds the server's clock is ahead of this machine's (behind when negative), as
        /// signatures are checked: a client whose clock is off by as much.
        public var clockOffset: Double = 0

        public enum HTTPVersions: String, Sendable, CaseIterable {
            case http1 = "1.1"
            case http2 = "2"
            case both
        }

        public init(
            host: String = "127.0.0.1", port: Int = 0, container: String = "iCloud.com.example.fake",
            environment: String = "development", settings: FakeSettings = FakeSettings(), scenarioFile: String? = nil,
            userRecordName: String = "_fakeUser", apiToken: String = "fake-api-token",
            webAuthTokens: [String] = ["fake-web-auth-token"],
            redirectURL: String? = nil,
            preparesPages: Bool = false, tokenWindow: Int? = nil, tokenRetirement: TokenRetirement = .onUse,
            latency: Duration = .zero, jitter: Duration = .zero,
            maxInFlight: Int? = nil, throttleRetryAfter: Double = 0.25,
            tls: TLSIdentity? = nil, httpVersions: HTTPVersions = .both, courierPort: Int = 0,
            publicRecords: Int = 0, indexLag: ClosedRange<Int> = 0...0, serverKeys: [String: String] = [:]
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
            self.tls = tls
            self.httpVersions = httpVersions
            self.courierPort = courierPort
            self.publicRecords = publicRecords
            self.indexLag = indexLag
            self.serverKeys = serverKeys
        }

        /// `https` over TLS, else `http`.
        public var scheme: String { tls == nil ? "http" : "https" }
    }

    /// What listens once the server is up.
    public struct Listening: Sendable {
        /// The CloudKit API's port (and the admin endpoints').
        public var port: Int
        /// The web courier's port.
        public var courierPort: Int
    }

    /// The two origins as Hummingbird applications, for a caller that runs them in its own
    /// `ServiceGroup`. `onReady` is called once both listen. Throws when the scenario file cannot
    /// be read or the TLS identity is not usable.
    static func makeApplications(
        _ configuration: Configuration, logger: Logger, onReady: @escaping @Sendable (Listening) async -> Void
    ) async throws -> [any Service] {
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
        let ready = ReadyPorts(onReady: onReady)
        func application(_ origin: FakeCloudKitResponder.Origin, port: Int) throws -> any Service {
            Application(
                responder: FakeCloudKitResponder(store: store, origin: origin),
                server: try HTTPServerBuilder.fake(configuration),
                configuration: ApplicationConfiguration(
                    address: .hostname(configuration.host, port: port), serverName: "AppleHttpServer/fake"),
                onServerRunning: { channel in
                    let bound = channel.localAddress?.port ?? port
                    if origin == .courier { await store.setCourierPort(bound) }
                    await ready.listening(origin, on: bound)
                },
                logger: logger)
        }
        return [try application(.api, port: configuration.port), try application(.courier, port: configuration.courierPort)]
    }

    /// Runs the server until the calling task is cancelled; `onReady` gets the bound ports (the
    /// real ones when the configuration asks for port 0).
    ///
    /// Cancellation stops the server at once, cutting open connections; HummingbirdCore logs
    /// that at error level ("Waiting on child channel: CancellationError()"), so a test passes a
    /// logger set to `.critical`. `runFromCommandLine` stops gracefully on signals.
    public static func run(
        _ configuration: Configuration, logger: Logger, onReady: @escaping @Sendable (Listening) async -> Void
    ) async throws {
        let services = try await makeApplications(configuration, logger: logger, onReady: onReady)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for service in services { group.addTask { try await service.run() } }
            defer { group.cancelAll() }
            try await group.next()
        }
    }

    /// `zonefeed fake-server`: prints one line to stdout when the server listens, then serves
    /// until SIGINT or SIGTERM. Over TLS with a certificate it made, the line names the file the
    /// CA certificate was written to (`caFile`), and the file is removed at exit.
    public static func runFromCommandLine(_ configuration: Configuration, caFile: String?, logger: Logger) async throws {
        if let caFile, let pem = configuration.tls?.caCertificatePEM {
            try Data(pem.utf8).write(to: URL(fileURLWithPath: caFile), options: .atomic)
        }
        defer { if let caFile, configuration.tls?.caCertificatePEM != nil { try? FileManager.default.removeItem(atPath: caFile) } }
        let services = try await makeApplications(configuration, logger: logger) { listening in
            let scheme = configuration.scheme
            var line =
                "fake CloudKit server listening on \(scheme)://\(configuration.host):\(listening.port) "
                + "(container \(configuration.container), environment \(configuration.environment)); "
                + "web courier on \(scheme)://\(configuration.host):\(listening.courierPort)"
            if configuration.tls != nil {
                line += "; TLS offering \(configuration.httpVersions.alpnDescription)"
                if let caFile, configuration.tls?.caCertificatePEM != nil { line += "; CA certificate in \(caFile)" }
            }
            // Unbuffered, so that a parent process reading a pipe sees the line at once.
            FileHandle.standardOutput.write(Data((line + "\n").utf8))
        }
        let group = ServiceGroup(
            configuration: .init(
                services: services.map { .init(service: $0) }, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await group.run()
    }
}

/// Calls `onReady` once both origins listen.
private actor ReadyPorts {
    let onReady: @Sendable (FakeCloudKitServer.Listening) async -> Void
    var api: Int?
    var courier: Int?

    init(onReady: @escaping @Sendable (FakeCloudKitServer.Listening) async -> Void) { self.onReady = onReady }

    func listening(_ origin: FakeCloudKitResponder.Origin, on port: Int) async {
        switch origin {
        case .api: api = port
        case .courier: courier = port
        }
        if let api, let courier { await onReady(.init(port: api, courierPort: courier)) }
    }
}

extension FakeCloudKitServer.Configuration.HTTPVersions {
    var alpnDescription: String {
        switch self {
        case .http1: "http/1.1"
        case .http2: "h2"
        case .both: "h2 and http/1.1"
        }
    }
}

extension HTTPServerBuilder {
    /// Plain HTTP/1.1, or TLS offering by ALPN what the configuration asks.
    static func fake(_ configuration: FakeCloudKitServer.Configuration) throws -> HTTPServerBuilder {
        guard let identity = configuration.tls else { return .http1() }
        let chain = try NIOSSLCertificate.fromPEMBytes(Array(identity.certificateChainPEM.utf8)).map { NIOSSLCertificateSource.certificate($0) }
        let key = try NIOSSLPrivateKey(bytes: Array(identity.privateKeyPEM.utf8), format: .pem)
        var tls = TLSConfiguration.makeServerConfiguration(certificateChain: chain, privateKey: .privateKey(key))
        switch configuration.httpVersions {
        case .both:
            return try .http2Upgrade(tlsConfiguration: tls)
        case .http2:
            tls.applicationProtocols = ["h2"]
            return try .tls(.plaintextHTTP2(), tlsConfiguration: tls)
        case .http1:
            tls.applicationProtocols = ["http/1.1"]
            return try .tls(.http1(), tlsConfiguration: tls)
        }
    }
}
