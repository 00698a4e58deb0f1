import AsyncHTTPClient
import CloudKitWebServices
import Logging
import ZoneFeed

/// CloudKit Web Services as a `ChangeSource` (`source.cloudkit`): `users/caller` for the account
/// check, `changes/database` for zone discovery and `records/changes` for each zone's pages;
/// `records/query` for `_defaultZone`, which has no change feed (`QueryZoneReader`).
///
/// Retries happen in the client; what reaches the engine is a `SyncError` whose code tells it
/// what to do: sign in again, resync the zone, treat the zone as deleted, or fail the zone.
public struct CloudKitSource: ChangeSource {
    public let client: CloudKitClient
    public let settings: CloudKitSettings
    let logger: Logger
    /// The start of the IDs of the zone subscriptions this source makes (`zonefeed watch`):
    /// `zonefeed.<pipeline>.`, so that pipelines sharing an account keep their own.
    public var subscriptionPrefix = "zonefeed."
    /// The record types a zone read by query (`_defaultZone`) is asked for: the destination's.
    public var recordTypes: [String] = []
    /// What this run's query pages have given at their slices' starts (`QueryZoneReader`).
    let queryMemory = QueryReadMemory()

    /// - Parameters:
    ///   - httpClient: shared with the caller; when nil the client makes its own and
    ///     `shutdown()` must be called.
    ///   - tokenVault: where the web auth tokens are kept when `auth.webAuthTokenStore` is
    ///     `database` (the destination's table); required then, unused otherwise.
    public init(settings: CloudKitSettings, tokenVault: (any WebAuthTokenVault)? = nil, httpClient: HTTPClient? = nil, logger: Logger) throws {
        var configuration = try Self.clientConfiguration(for: settings)
        if settings.auth.webAuthTokenStore == .database {
            guard let tokenVault else {
                throw SyncError(.failed, message: "auth.webAuthTokenStore is database, but no database was given to keep the web auth tokens in")
            }
            configuration.webAuthTokenVault = tokenVault
        }
        self.init(client: CloudKitClient(configuration: configuration, httpClient: httpClient, logger: logger), settings: settings, logger: logger)
    }

    public init(client: CloudKitClient, settings: CloudKitSettings, logger: Logger) {
        self.client = client
        self.settings = settings
        var logger = logger
        logger[metadataKey: "source"] = "cloudkit"
        self.logger = logger
    }

    /// Shuts down the HTTP client if the source made it.
    public func shutdown() async throws {
        try await client.shutdown()
    }

    /// The client configuration a pipeline's `source.cloudkit` section describes.
    public static func clientConfiguration(for settings: CloudKitSettings) throws -> CloudKitClient.Configuration {
        var configuration = CloudKitClient.Configuration(
            container: settings.container,
            environment: settings.environment == .development ? .development : .production,
            database: Self.database(settings.database),
            baseURL: settings.baseURL)
        configuration.apiToken = settings.auth.apiToken?.value
        configuration.webAuthToken = settings.auth.webAuthToken?.value
        configuration.webAuthTokenFile = settings.auth.webAuthTokenFile
        configuration.serverKey = settings.auth.serverKey
        if let caFile = settings.tlsCAFile {
            do {
                configuration.tlsTrust = try TLSTrust.reading(caFile: caFile)
            } catch {
                throw SyncError(.failed, message: "source.cloudkit.tls.caFile: \(error)", underlying: error)
            }
        }
        // The file's ranges bound these; the conversions could not trap even without them.
        configuration.timeout = Duration(clampingSeconds: settings.timeoutSeconds)
        configuration.retry.maxAttempts = settings.maxAttempts
        configuration.retry.budget = Duration(clampingSeconds: settings.retryBudgetSeconds)
        configuration.maxConcurrentRequests = settings.maxConcurrentRequests
        configuration.idleTimeout = Duration(clampingSeconds: settings.idleTimeoutSeconds)
        configuration.maxRetryAfter = Duration(clampingSeconds: settings.maxRetryAfterSeconds)
        configuration.maxResponseBytes = settings.maxResponseBytes
        configuration.maxResponseBytesSetting = "source.cloudkit.maxResponseBytes"
        return configuration
    }

    static func database(_ database: CloudKitSettings.Database) -> CloudKitClient.Configuration.Database {
        switch database {
        case .private: .private
        case .shared: .shared
        case .public: .public
        }
    }

    // MARK: ChangeSource

    public func currentUser() async throws -> String? {
        // The public database is the app's, whoever reads it: no account to hold to.
        if settings.database == .public { return nil }
        do {
            return try await client.caller(logger: logger).userRecordName
        } catch let error as CloudKitError {
            throw sourceError(for: error, zone: nil, carriedToken: false)
        }
    }

    public var namedZones: [ZoneID]? {
        switch settings.zones {
        case .all: return nil
        // The owner is left to CloudKit, which takes the caller.
        case .named(let names): return names.map { ZoneID(zoneName: $0, ownerRecordName: ZoneID.defaultOwner) }
        }
    }

    public func fetchDatabaseChanges(since token: ChangeToken?) async throws -> DatabaseChangePage {
        let response: DatabaseChangesResponse
        do {
            response = try await client.fetchDatabaseChanges(syncToken: token?.value, logger: logger)
        } catch let error as CloudKitError {
            throw sourceError(for: error, zone: nil, carriedToken: token != nil)
        }
        var modified: [ZoneID] = []
        var deleted: [ZoneDeletion] = []
        var refused: [RefusedZone] = []
        for zone in response.zones {
            if zone.unreadableName {
                refused.append(
                    RefusedZone(
                        zoneID: zone.zoneID,
                        reason: "the database feed named a zone whose name is not valid UTF-8 text; "
                            + "it cannot be followed under a name that may be another zone's, and is not exported"))
            } else if zone.purged {
                deleted.append(ZoneDeletion(zoneID: zone.zoneID, reason: .purged))
            } else if zone.encryptedDataReset {
                deleted.append(ZoneDeletion(zoneID: zone.zoneID, reason: .encryptedDataReset))
            } else if zone.deleted {
                deleted.append(ZoneDeletion(zoneID: zone.zoneID, reason: .deleted))
            } else {
                if let code = zone.serverErrorCode {
                    // Fetching the zone itself will say what is wrong with it.
                    logger.warning(
                        "the database feed returned an error for a zone; fetching it anyway",
                        metadata: ["zone": "\(zone.zoneID.zoneName)", "code": "\(code)", "reason": "\(zone.reason ?? "")"])
                }
                modified.append(zone.zoneID)
            }
        }
        return DatabaseChangePage(
            modifiedZones: modified, deletedZones: deleted, syncToken: ChangeToken(response.syncToken),
            moreComing: response.moreComing, refusedZones: refused)
    }

    /// One page; the engine reads a zone's pages through `zonePages(in:since:readingAhead:)`,
    /// which asks for the next ones while it writes.
    public func fetchZoneChanges(in zone: ZoneID, since token: ChangeToken?) async throws -> ZoneChangePage {
        if zone.zoneName == ZoneID.defaultZoneName {
            // No change feed: read by query, a record type at a time.
            let reader = QueryZoneReader(
                client: client, zone: zone, recordTypes: recordTypes, settings: settings, memory: queryMemory, logger: logger)
            return try await reader.page(after: token)
        }
        let response: RecordZoneChangesResponse
        do {
            response = try await client.fetchRecordZoneChanges(
                zoneID: zone, syncToken: token?.value, resultsLimit: settings.resultsLimit,
                desiredKeys: settings.desiredKeys, logger: logger)
        } catch let error as CloudKitError {
            throw sourceError(for: error, zone: zone, carriedToken: token != nil)
        }
        var page = ZoneChangePage(
            zoneID: zone, entries: response.records, syncToken: ChangeToken(response.syncToken),
            moreComing: response.moreComing)
        page.byteCount = response.byteCount
        return page
    }

    /// The records a deletion sweep listed without a row, by `records/lookup`, `resultsLimit`
    /// names a request, with the fields the pipeline asks for. A lookup reads the records, not a
    /// query index, so it finds those a query showed too late for the pass that should have
    /// read them. An error entry is left out: one gone since it was listed (`NOT_FOUND`) is
    /// seen to by the sweep's end, and one that failed for now (`TRY_AGAIN_LATER`) by the next
    /// sweep, not made a reject. A failed request fails the zone, never as a zone gone: the
    /// `_defaultZone` always exists, and its rows must not be dropped.
    public func lookUpRecords(_ listed: [ListedRecords], in zone: ZoneID) async throws -> [RecordEntry] {
        let names = listed.flatMap(\.names)
        let perRequest = entriesPerLookup
        var entries: [RecordEntry] = []
        for start in stride(from: 0, to: names.count, by: perRequest) {
            let response: RecordQueryResponse
            let asked = Array(names[start..<min(names.count, start + perRequest)])
            do {
                response = try await client.lookUpRecords(
                    asked,
                    zoneID: zone.zoneName == ZoneID.defaultZoneName ? nil : zone, desiredKeys: settings.desiredKeys, logger: logger)
            } catch let error as CloudKitError {
                if error.isAuthenticationFailure {
                    throw SyncError(.authenticationRequired, zoneID: zone, message: error.description, underlying: error)
                }
                throw SyncError(
                    .failed, zoneID: zone,
                    message: "looking up \(asked.count) of the \(names.count) records a deletion sweep listed without a row failed: "
                        + "\(error.description); the sweep's batch was not applied, and the next run reads it again",
                    underlying: error)
            }
            for entry in response.records {
                if case .error = entry { continue }
                entries.append(entry)
            }
        }
        return entries
    }

    /// `resultsLimit` names a request, at most 200.
    public var entriesPerLookup: Int { max(1, min(settings.resultsLimit, 200)) }

    /// A zone read by query gives a round of queries a page: a page of each slice read at once.
    public func entriesPerPage(in zone: ZoneID) -> Int {
        zone.zoneName == ZoneID.defaultZoneName ? settings.resultsLimit * max(1, settings.maxConcurrentRequests) : settings.resultsLimit
    }

    /// One zone per request that may be in flight: a zone's pages come one after another. None
    /// beyond the destination's when an earlier run learned that requests go one at a time.
    public var concurrentZones: Int? { client.learnedOneAtATime ? nil : settings.maxConcurrentRequests }

    public func throttledSeconds() async -> Double { await client.throttledSeconds }

    // MARK: Errors

    /// How the engine should take a client failure (PRODUCT.md, "Errors").
    func sourceError(for error: CloudKitError, zone: ZoneID?, carriedToken: Bool) -> SyncError {
        if error.isAuthenticationFailure {
            return SyncError(.authenticationRequired, zoneID: zone, message: error.description, underlying: error)
        }
        if error.code == .zoneNotFound {
            return SyncError(.zoneNotFound, zoneID: zone, message: error.description, underlying: error)
        }
        // REST documents no error for a stale sync token; a 4xx on a token-bearing call is the
        // likely form (reference §0: "likely BAD_REQUEST/400"), so it is taken as one. The
        // engine resyncs at most once per zone and run, so a 4xx that has another cause cannot
        // loop.
        if carriedToken, Self.refusesTheToken(error) {
            logger.warning(
                "the server refused a call that carried a sync token; taking the token as expired",
                metadata: [
                    "zone": "\(zone?.zoneName ?? "(database)")", "code": "\(error.code)",
                    "reason": "\(error.reason ?? "")", "uuid": "\(error.uuid ?? "")",
                ])
            let reason = error.reason.map { ": \($0)" } ?? ""
            return SyncError(
                .changeTokenExpired, zoneID: zone,
                message: "the server no longer accepts the sync token (\(error.code))\(reason)", underlying: error)
        }
        return SyncError(.failed, zoneID: zone, message: error.description, underlying: error)
    }

    /// Whether a refusal of a call that carried a sync token stands for the token: BAD_REQUEST
    /// or CHANGE_TOKEN_EXPIRED (PRODUCT.md), and any other final 4xx answer in CloudKit's own
    /// error body (NOT_FOUND, CONFLICT, a code not documented) but those a new token cannot
    /// change: authentication, permission, quota, throttling. Taken only as 400, a stale token
    /// answered otherwise failed its zone in every run until a person ran `zonefeed reset`. A
    /// proxy's page, a 408 or an answer worth retrying is not taken so: each would cost a whole
    /// zone's refetch.
    static func refusesTheToken(_ error: CloudKitError) -> Bool {
        if error.code == .badRequest || error.code == .changeTokenExpired { return true }
        guard error.sentByCloudKit, !error.isRetryable, let status = error.httpStatus, (400..<500).contains(status),
            ![401, 403, 408, 413, 421, 429].contains(status)
        else { return false }
        return ![CloudKitError.Code.accessDenied, .quotaExceeded, .throttled, .tryAgainLater, .internalError, .authenticationFailed, .authenticationRequired]
            .contains(error.code)
    }
}
