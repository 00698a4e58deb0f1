import CloudKitModel

/// What happens during a run, in the sync engine's vocabulary, delivered serially in order. Logs,
/// the progress display, metrics and tests all listen to the same events.
public enum SyncEvent: Sendable {
    case willFetchChanges(runID: Int64)
    case fetchedDatabaseChanges(modified: [ZoneID], deleted: [ZoneDeletion])
    /// A page of the database change feed was applied with its token: the rows of the zones it
    /// deleted were tombstoned (the `zoneDeleted` events that follow carry no outcome of their own).
    case appliedDatabaseChanges(BatchOutcome)
    case zoneClaimedElsewhere(ZoneID)
    case willFetchRecordZoneChanges(ZoneID, resyncing: Bool)
    /// A batch was committed; `total` is what the zone has applied so far in this run.
    case fetchedRecordZoneChanges(ZoneID, batch: BatchOutcome, total: BatchOutcome)
    case resyncStarted(ZoneID, reason: String)
    case zoneDeleted(ZoneDeletion, outcome: BatchOutcome)
    case didFetchRecordZoneChanges(ZoneID, error: (any Error)?)
    case didFetchChanges(RunSummary)
    /// A token was stored (nil zone: the database token).
    case stateUpdate(ZoneID?, ChangeToken)
    /// A page of the zone's feed came (before its batch is applied): a sign of life of a
    /// cycle whose pages are slow to come (`watch`'s /healthz).
    case fetchedZonePage(ZoneID)
}

/// Receives events; called serially by the runner.
public typealias SyncEventHandler = @Sendable (SyncEvent) async -> Void

/// A run's result, as the summary prints it.
public struct RunSummary: Sendable {
    public var runID: Int64
    public var pipeline: String
    public var status: RunStatus
    public var totals = BatchOutcome()
    public var zonesApplied: [ZoneID] = []
    public var zonesUpToDate: [ZoneID] = []
    public var zonesClaimedElsewhere: [ZoneID] = []
    /// Zones whose lock this run took (`zonefeed_zones_claimed`).
    public var zonesClaimed = 0
    public var zonesFailed: [(ZoneID, String)] = []
    /// Why the database's change feed was given up on (the zones it named were still fetched).
    public var databaseFeedFailed: String?
    public var zonesDeleted: [ZoneDeletion] = []
    public var seconds: Double = 0
    /// How long the source's requests were paused because the server throttled them.
    public var throttledSeconds: Double = 0
    public var error: String?

    public init(runID: Int64, pipeline: String, status: RunStatus) {
        self.runID = runID
        self.pipeline = pipeline
        self.status = status
    }

    public var recordsPerSecond: Double { seconds > 0 ? Double(totals.records) / seconds : 0 }

    /// Adds what another part of the same run did (zones fetched in parallel).
    mutating func add(_ part: RunSummary) {
        totals += part.totals
        zonesApplied += part.zonesApplied
        zonesUpToDate += part.zonesUpToDate
        zonesClaimedElsewhere += part.zonesClaimedElsewhere
        zonesClaimed += part.zonesClaimed
        zonesFailed += part.zonesFailed
        zonesDeleted += part.zonesDeleted
    }
}
