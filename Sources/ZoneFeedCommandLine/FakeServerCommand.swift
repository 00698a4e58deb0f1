import ArgumentParser
import FakeCloudKit
import FakeCloudKitServer
import Foundation
import Logging
import ZoneFeed

struct FakeServerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fake-server",
        abstract: "Serve a fake CloudKit Web Services API on loopback (records/changes, changes/database, zones/list, users/caller).",
        discussion: """
            Serves the fake generator's feed (or a scenario file) with CloudKit's JSON shapes, web \
            auth token rotation and error bodies, plus admin endpoints under /admin/ to add and \
            delete records, delete or purge zones, expire tokens and inject faults. Point a \
            pipeline's baseURL at it (see pipelines/fake-server.yml).

            By default it is as lenient as the lab: it answers at once, accepts every token it \
            ever issued and any number of requests at once. --token-window, --latency and \
            --max-in-flight make it as strict and as far away as the field.
            """)

    @Option(
        help: """
            The address to listen on: 127.0.0.1 (the default) keeps the server to this machine; \
            0.0.0.0 lets other machines or containers reach it (docker compose).
            """)
    var host = "127.0.0.1"

    @Option(help: "The port, 0 to 65535 (0 picks a free one; the ready line says which).")
    var port = 8765

    @Option(help: "The generator's seed.")
    var seed: UInt64 = 42

    @Option(help: "How many zones the generator makes (1 to 1000).")
    var zones = 3

    @Option(name: .customLong("records-per-zone"), help: "How many entries each zone's history holds (0 to 100,000,000).")
    var recordsPerZone = 10_000

    @Option(name: .customLong("page-size"), help: "The generator's page size (1...200): how its history is laid out.")
    var pageSize = 200

    @Flag(name: .customLong("no-churn"), help: "Every entry of the generator's history creates a new record (no updates or deletions).")
    var noChurn = false

    @Option(
        name: .customLong("field-sets"),
        help: "Notes take their fields from this many sets a zone (1 to 4,096), each written once, instead of drawing their own (zonefeed bench).")
    var fieldSets: Int?

    @Flag(
        name: .customLong("prepare-pages"),
        help:
            "Render every zone's pages from a nil token before listening and serve them from memory, so that a backfill measures the client, not the server (zonefeed bench does)."
    )
    var preparePages = false

    @Option(help: "A scenario file to serve instead of the generator.")
    var scenario: String?

    @Option(name: .customLong("api-token"), help: "The API token requests must carry.")
    var apiToken = "fake-api-token"

    @Option(name: .customLong("web-auth-token"), help: "The web auth token accepted at first.")
    var webAuthToken = "fake-web-auth-token"

    @Option(
        name: .customLong("token-window"),
        help:
            "Accept a web auth token only until N (1 to 1000) newer ones have been used (or issued: --token-retirement), and the configured one only until a rotated one is used (Apple: the previous token becomes invalid). Without it every issued token stays good."
    )
    var tokenWindow: Int?

    @Option(
        name: .customLong("token-retirement"),
        help:
            "With --token-window: 'use' retires a token once N newer ones have been used; 'issue' once N newer ones have been issued, answered or not (the harshest reading: a response lost with a killed client counts)."
    )
    var tokenRetirement: FakeCloudKitServer.Configuration.TokenRetirement = .onUse

    @Option(
        help:
            "Make every CloudKit round trip take MS milliseconds (0 to 60000), give or take JITTER (0 to MS, uniformly), half before the server handles the request and half after: MS or MS,JITTER."
    )
    var latency: Latency?

    @Option(
        name: .customLong("max-in-flight"),
        help: "Answer 429 THROTTLED (retryAfter: --throttle-retry-after) to every CloudKit request that arrives while M (1 to 10000) are already in flight.")
    var maxInFlight: Int?

    @Option(
        name: .customLong("throttle-retry-after"),
        help: "The retryAfter, in seconds (0...3600), of the 429 that --max-in-flight answers (0.25 unless told).")
    var throttleRetryAfter: Double = 0.25

    @Flag(
        help: """
            Serve HTTPS with a certificate made at start, signed by a CA made at start whose \
            certificate is written to --ca-file (the ready line names it; give it to a pipeline as \
            source.cloudkit.tls.caFile). With --tls-cert and --tls-key, serve those instead.
            """)
    var tls = false

    @Option(help: "Over TLS, what ALPN offers: 1.1, 2 or both (the default, as CloudKit's edge).")
    var http: FakeCloudKitServer.Configuration.HTTPVersions = .both

    @Option(name: .customLong("tls-cert"), help: "With --tls: a PEM file with the server's certificate chain, leaf first.")
    var tlsCert: String?

    @Option(name: .customLong("tls-key"), help: "With --tls-cert: a PEM file with the certificate's private key.")
    var tlsKey: String?

    @Option(
        name: .customLong("ca-file"),
        help: "With --tls and no --tls-cert: where to write the CA certificate (a file in the temporary folder unless told; removed at exit).")
    var caFile: String?

    @Option(
        name: .customLong("courier-port"),
        help: "The web courier's port, 0 to 65535 (0, the default, picks a free one): the courier is an origin of its own.")
    var courierPort = 0

    @Option(
        name: .customLong("sign-in-callback"),
        help: """
            Where the sign-in page (the 421's redirectURL, /signin on this server) sends the browser with ckWebAuthToken: \
            the API token's sign-in callback, as set in CloudKit Dashboard (zonefeed login's default unless told).
            """)
    var signInCallback = FakeCloudKitServer.Configuration.SignIn().callbackURL

    @Option(
        name: .customLong("sign-in-address"),
        help: "The 421's redirectURL, as given (a broken or hostile server's, say), instead of this server's own /signin page.")
    var signInAddress: String?

    @Option(
        name: .customLong("session-lifetime"),
        help:
            "End a session SECONDS (1 to 31536000) after its sign-in (the configured token's: after the server starts): its tokens are then answered 421 AUTHENTICATION_REQUIRED. Apple's: 1800. Without it sessions never end."
    )
    var sessionLifetime: Int?

    @Option(
        name: .customLong("long-session-lifetime"),
        help: "The same for a sign-in with \"Keep me signed in\" ticked. Apple's: 1209600 (two weeks). Without it such sessions never end.")
    var longSessionLifetime: Int?

    @Option(
        name: .customLong("public-records"),
        help: "How many generated entries the public database's _defaultZone holds, read with records/query (0 to 100,000,000; 0 unless told).")
    var publicRecords = 0

    @Option(
        name: .customLong("index-lag"),
        help:
            "How long a record added through the admin API stays unseen by records/query, drawn per entry: MS or MIN,MAX milliseconds (0 to 600000), as CloudKit updates its query indexes asynchronously and out of order."
    )
    var indexLag: IndexLag?

    @Option(
        name: .customLong("server-key"),
        help:
            "A server-to-server key CloudKit Dashboard knows, KEYID=FILE: FILE holds its public key in PEM (openssl ec -pubout writes one). Requests signed with it reach the public database. Repeatable."
    )
    var serverKeys: [String] = []

    @Option(
        name: .customLong("clock-offset"),
        help: "Seconds the server's clock is ahead of this machine's (negative: behind), as server-to-server signatures are checked (-86400...86400)."
    )
    var clockOffset: Double = 0

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical.", transform: Logger.Level.parse)
    var logLevel: Logger.Level = .notice

    /// `--latency 100` or `--latency 100,20`.
    struct Latency: ExpressibleByArgument {
        var milliseconds: Int
        var jitterMilliseconds: Int

        init?(argument: String) {
            let parts = argument.split(separator: ",", omittingEmptySubsequences: false)
            guard (1...2).contains(parts.count), let ms = Int(parts[0]), ms >= 0 else { return nil }
            let jitter = parts.count == 2 ? Int(parts[1]) : 0
            guard let jitter, jitter >= 0, jitter <= ms else { return nil }
            milliseconds = ms
            jitterMilliseconds = jitter
        }
    }

    /// `--index-lag 500` or `--index-lag 100,2000`.
    struct IndexLag: ExpressibleByArgument {
        var range: ClosedRange<Int>

        init?(argument: String) {
            let parts = argument.split(separator: ",", omittingEmptySubsequences: false).map { Int($0) }
            guard (1...2).contains(parts.count), let low = parts[0], let high = parts.count == 2 ? parts[1] : low, low >= 0, low <= high else { return nil }
            range = low...high
        }
    }

    // The flags' ranges: a value past them is refused before the server starts, rather than
    // overflow a duration or a count behind it.
    static let portRange = 0...65_535
    static let tokenWindowRange = 1...1_000
    static let latencyRange = 0...60_000
    static let maxInFlightRange = 1...10_000
    static let throttleRetryAfterRange = 0.0...3_600.0
    static let sessionLifetimeRange = 1...31_536_000
    static let indexLagRange = 0...600_000

    func validate() throws {
        try FlagRange.check("--port", port, in: Self.portRange)
        try FlagRange.check("--courier-port", courierPort, in: Self.portRange)
        if !tls {
            for (flag, given) in [("--tls-cert", tlsCert != nil), ("--tls-key", tlsKey != nil), ("--ca-file", caFile != nil), ("--http", http != .both)]
            where given {
                throw ValidationError("\(flag) needs --tls: without it the server speaks plain HTTP/1.1")
            }
        }
        guard (tlsCert == nil) == (tlsKey == nil) else { throw ValidationError("--tls-cert and --tls-key go together: a certificate and its key") }
        if tlsCert != nil, caFile != nil {
            throw ValidationError("--ca-file is where the server writes the CA it makes; with --tls-cert, hand clients the CA that signed your certificate")
        }
        try FlagRange.check("--zones", zones, in: FakeSettings.zonesRange)
        try FlagRange.check("--records-per-zone", recordsPerZone, in: FakeSettings.recordsPerZoneRange)
        try FlagRange.check("--page-size", pageSize, in: FakeSettings.pageSizeRange)
        if let fieldSets { try FlagRange.check("--field-sets", fieldSets, in: FakeSettings.fieldSetsRange) }
        if let tokenWindow { try FlagRange.check("--token-window", tokenWindow, in: Self.tokenWindowRange) }
        if let latency { try FlagRange.check("--latency", latency.milliseconds, in: Self.latencyRange, unit: "milliseconds") }
        if let maxInFlight { try FlagRange.check("--max-in-flight", maxInFlight, in: Self.maxInFlightRange) }
        try FlagRange.check("--public-records", publicRecords, in: FakeSettings.recordsPerZoneRange)
        guard clockOffset.isFinite, abs(clockOffset) <= 86_400 else {
            throw ValidationError("--clock-offset must be between -86400 and 86400 seconds")
        }
        if let indexLag { try FlagRange.check("--index-lag", indexLag.range.upperBound, in: Self.indexLagRange, unit: "milliseconds") }
        try FlagRange.check("--throttle-retry-after", throttleRetryAfter, in: Self.throttleRetryAfterRange, unit: "seconds")
        if let sessionLifetime { try FlagRange.check("--session-lifetime", sessionLifetime, in: Self.sessionLifetimeRange, unit: "seconds") }
        if let longSessionLifetime {
            try FlagRange.check("--long-session-lifetime", longSessionLifetime, in: Self.sessionLifetimeRange, unit: "seconds")
        }
        guard signInCallback.hasPrefix("http://") || signInCallback.hasPrefix("https://") else {
            throw ValidationError("--sign-in-callback must be an http:// or https:// URL, such as http://127.0.0.1:8790/callback")
        }
    }

    func run() async throws {
        let level = logLevel
        let logger = Logger(label: "zonefeed.fake-server") { label in ZoneFeedLogHandler(label: label, format: .text, logLevel: level) }
        var identity: TLSIdentity?
        var caFile = caFile
        if tls {
            if let tlsCert, let tlsKey {
                identity = TLSIdentity(
                    certificateChainPEM: try Self.readPEM(tlsCert, what: "--tls-cert"), privateKeyPEM: try Self.readPEM(tlsKey, what: "--tls-key"))
            } else {
                identity = try FakeCertificateAuthority.makeIdentity(hosts: [host])
                caFile =
                    caFile
                    ?? FileManager.default.temporaryDirectory.appendingPathComponent(
                        "zonefeed-fake-server-\(ProcessInfo.processInfo.processIdentifier)-ca.pem"
                    ).path
            }
        }
        var keys: [String: String] = [:]
        for given in serverKeys {
            guard let equals = given.firstIndex(of: "="), equals != given.startIndex else {
                throw ValidationError("--server-key takes KEYID=FILE, the key's ID and a PEM file with its public key")
            }
            keys[String(given[..<equals])] = try Self.readPEM(String(given[given.index(after: equals)...]), what: "--server-key")
        }
        var configuration = FakeCloudKitServer.Configuration(
            host: host, port: port,
            settings: FakeSettings(seed: seed, zones: zones, recordsPerZone: recordsPerZone, pageSize: pageSize, churn: !noChurn, fieldSets: fieldSets),
            scenarioFile: scenario, apiToken: apiToken, webAuthTokens: [webAuthToken], preparesPages: preparePages,
            tokenWindow: tokenWindow, tokenRetirement: tokenRetirement, latency: .milliseconds(latency?.milliseconds ?? 0),
            jitter: .milliseconds(latency?.jitterMilliseconds ?? 0), maxInFlight: maxInFlight, throttleRetryAfter: throttleRetryAfter,
            tls: identity, httpVersions: http, courierPort: courierPort, publicRecords: publicRecords, indexLag: indexLag?.range ?? 0...0,
            serverKeys: keys)
        configuration.clockOffset = clockOffset
        configuration.redirectURL = signInAddress
        configuration.signIn = .init(
            callbackURL: signInCallback, sessionLifetime: sessionLifetime.map { .seconds($0) }, longSessionLifetime: longSessionLifetime.map { .seconds($0) })
        try await FakeCloudKitServer.runFromCommandLine(configuration, caFile: caFile, logger: logger)
    }

    /// A PEM file's text, read up to 1 MiB (a chain is a few kilobytes) and checked to be PEM.
    static func readPEM(_ path: String, what: String) throws -> String {
        guard let handle = FileHandle(forReadingAtPath: path) else { throw ValidationError("\(what) \(path) cannot be opened") }
        defer { try? handle.close() }
        let limit = 1 << 20
        let data = try handle.read(upToCount: limit + 1) ?? Data()
        guard data.count <= limit else { throw ValidationError("\(what) \(path) is larger than 1 MiB: it is not a PEM file") }
        guard let text = String(data: data, encoding: .utf8), text.contains("-----BEGIN ") else {
            throw ValidationError("\(what) \(path) is not a PEM file (no -----BEGIN line)")
        }
        return text
    }
}

extension FakeCloudKitServer.Configuration.TokenRetirement: ExpressibleByArgument {}
extension FakeCloudKitServer.Configuration.HTTPVersions: ExpressibleByArgument {}
