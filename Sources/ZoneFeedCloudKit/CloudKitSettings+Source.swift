import CloudKitWebServices
import Logging
import NIOPosix
import ZoneFeed

/// `source.cloudkit` makes its source and describes it: the command line knows neither.
extension CloudKitSettings {
    /// The client reads its saved tokens as it is made: from a file, or through the vault from a
    /// database. Both block, so it is made on NIO's pool for blocking work, not on a cooperative
    /// thread.
    public func makeSource(_ context: SourceContext, logger: Logger) async throws -> any ChangeSource {
        let settings = self
        let vault = context.vault.map { DestinationTokenVault($0) }
        var source = try await NIOThreadPool.singleton.runIfActive { try CloudKitSource(settings: settings, tokenVault: vault, logger: logger) }
        source.subscriptionPrefix = "zonefeed.\(context.pipelineName)."
        source.recordTypes = context.recordTypes ?? []
        return source
    }

    /// The indexes a query zone needs on each type: its modification time to filter and sort on,
    /// its record ID for a query with no filter.
    static let neededIndexes = ["___modTime QUERYABLE", "___modTime SORTABLE", "___recordID QUERYABLE"]

    /// The needed indexes a schema file does not declare, by record type.
    static func missingIndexes(_ declared: [String: Set<String>]?) -> [(String, [String])] {
        guard let declared else { return [] }
        return declared.keys.sorted().compactMap { type in
            let missing = neededIndexes.filter { !declared[type]!.contains($0) }
            return missing.isEmpty ? nil : (type, missing)
        }
    }

    /// Whether a zone is read by query: `_defaultZone`, which has no change feed.
    var readsByQuery: Bool { namedZones?.contains(ZoneID.defaultZoneName) ?? false }

    public var fetchedFields: (key: String, names: [String])? { desiredKeys.map { ("desiredKeys", $0) } }

    /// The public database is read with a key or the API token alone: nothing to sign in to.
    public var signsIn: Bool { database != .public }

    public var needsRecordTypes: String? {
        guard readsByQuery else { return nil }
        return "it reads \(ZoneID.defaultZoneName)\(database == .public ? " of the public database" : "") with records/query, "
            + "which asks for one record type at a time"
    }

    public func plan(_ context: PlanContext) -> PlanSection {
        var plan = PlanSection(heading: "source: CloudKit Web Services")
        plan.row("baseURL", baseURL)
        plan.row("container", container)
        plan.row("environment", environment.rawValue)
        plan.row("database", database.rawValue)
        switch zones {
        case .all: plan.row("zones", "all (discovered through the database change feed)")
        case .named(let names): plan.row("zones", names.joined(separator: ", "))
        }
        plan.row("resultsLimit", "\(resultsLimit) records per request")
        plan.row("desiredKeys", desiredKeys.map { $0.isEmpty ? "none" : $0.joined(separator: ", ") } ?? "all fields")
        if readsByQuery {
            plan.row(
                "queryLag",
                "\(CloudKitSettings.durationText(queryLagSeconds)): \(ZoneID.defaultZoneName) is read again from this long before its watermark each run")
            let perSweep = (100_000 + resultsLimit - 1) / resultsLimit
            plan.row(
                "deletionSweep",
                deletionSweep == .never
                    ? "never: record names are never listed, so a deletion is seen only when a notification brings it (watch)"
                    : "\(deletionSweep): lists every record name of each type, \(perSweep.grouped) requests per 100,000 records")
            for (type, missing) in Self.missingIndexes(context.declaredIndexes) {
                plan.row(
                    "warning",
                    "the schema file gives record type \(type) no \(missing.joined(separator: ", ")) index: CloudKit refuses its queries "
                        + "until it has them (add them in CloudKit Dashboard, Indexes, and deploy)")
            }
        }
        let seconds = Duration.secondsText
        plan.row(
            "requests",
            "timeout \(seconds(timeoutSeconds)) for a whole answer (\(seconds(idleTimeoutSeconds)) without a byte), "
                + "answers up to \(maxResponseBytes.grouped) bytes")
        plan.row(
            "retries",
            "at most \(maxAttempts) attempts within \(seconds(retryBudgetSeconds)); "
                + "a server's retryAfter counts up to \(seconds(maxRetryAfterSeconds))")
        plan.row(
            "maxConcurrentRequests",
            "\(maxConcurrentRequests) requests in flight at most (fewer while throttled; one if the server accepts only the newest token)")
        if baseURL.hasPrefix("https://") {
            plan.row(
                "tls",
                "certificates verified against the system's certificate authorities"
                    + (tlsCAFile.map { " and those of \($0)" } ?? "") + "; HTTP/2 where the server offers it")
        }
        var kinds: [String] = []
        if auth.apiToken != nil { kinds.append("apiToken <redacted>") }
        if auth.webAuthToken != nil { kinds.append("webAuthToken <redacted>") }
        if let file = auth.webAuthTokenFile {
            kinds.append("webAuthTokenFile \(file)" + (auth.webAuthTokenFileIsDefault ? " (the default for this pipeline)" : ""))
        }
        if auth.webAuthTokenStore == .database {
            kinds.append("webAuthTokenStore database (\(context.vaultLocation ?? "which this destination cannot keep"))")
        }
        if let key = auth.serverKey {
            kinds.append(
                "serverKey keyID <redacted>, \(auth.serverKeySource == "privateKey" ? "privateKey <redacted>" : "privateKeyFile \(auth.serverKeySource ?? "")") (fingerprint \(key.fingerprint))"
            )
        }
        plan.row("auth", kinds.joined(separator: ", "))
        return plan
    }
}

/// The vault the destination keeps for its source, as the client's keeper of web auth tokens
/// (`auth.webAuthTokenStore: database`). Its saves are durable when they return (the
/// PostgreSQL destination's are commits): nothing is left to sync.
public struct DestinationTokenVault: WebAuthTokenVault {
    let vault: any SourceVault

    public init(_ vault: any SourceVault) {
        self.vault = vault
    }

    public var location: String { vault.location }
    public func load() throws -> String? { try vault.load() }
    public func save(_ text: String) throws { try vault.save(text) }
    public func update(_ change: (String?) throws -> String) throws { try vault.update(change) }
    public func sync() {}
}
