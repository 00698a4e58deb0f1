import CloudKitModel

/// Where a zone stands: its token, its sync generation and whether a resync is under way.
public struct ZoneCheckpoint: Sendable, Hashable {
    public var token: ChangeToken?
    public var generation: Int
    public var resyncing: Bool

    public init(token: ChangeToken?, generation: Int, resyncing: Bool) {
        self.token = token
        self.generation = generation
        self.resyncing = resyncing
    }
}

public enum RunStatus: String, Sendable { case running, succeeded, failed, interrupted }

/// Where changes go. Each batch, with its token, is applied atomically; the destination keeps the
/// checkpoints and the run history. Implementations keep blocking work off the cooperative pool.
public protocol Destination: Sendable {
    /// Creates what is missing (schema, tables, views); safe to run concurrently.
    func prepare() async throws
    /// Records a new run as `running` and returns its ID.
    func startRun() async throws -> Int64
    /// Records how the run ended, and how long it waited because the source was throttled.
    func finishRun(_ runID: Int64, status: RunStatus, error: String?, throttledSeconds: Double) async throws

    /// The account the checkpoints belong to, and recording it.
    func storedAccount() async throws -> String?
    func storeAccount(_ user: String) async throws

    /// The database feed's token (scope `database`).
    func databaseCheckpoint() async throws -> ChangeToken?
    /// Applies the page's zone deletions (deleted, purged: rows; encrypted-data reset: resync),
    /// marks changed zones as pending and stores the database token, in one transaction. Returns
    /// nil, applying nothing, when the stored token is no longer `previous` (another run moved
    /// the database feed on meanwhile).
    func applyDatabaseChanges(_ page: DatabaseChangePage, after previous: ChangeToken?, runID: Int64) async throws -> BatchOutcome?
    /// Zones the database feed reported changed that have not been fetched to the end since.
    func pendingZones() async throws -> [ZoneID]

    /// Claims a zone for this process; false when another run holds it.
    func claimZone(_ zone: ZoneID) async throws -> Bool
    func releaseZone(_ zone: ZoneID) async throws
    /// The zone's checkpoint, created (nil token, generation 1) when missing.
    func zoneCheckpoint(_ zone: ZoneID) async throws -> ZoneCheckpoint
    /// Starts a resync: nil token, next generation, `resyncing` set.
    func beginResync(_ zone: ZoneID, reason: String) async throws -> ZoneCheckpoint
    /// Applies a batch and its token in one transaction.
    func apply(_ batch: ChangeBatch) async throws -> BatchOutcome
    /// Applies a zone's deletion (reason `deleted` or `purged`) and drops its checkpoint.
    func deleteZone(_ deletion: ZoneDeletion, runID: Int64) async throws -> BatchOutcome
    func recordZoneError(_ zone: ZoneID, message: String?) async throws
}
