import CloudKitModel

/// Where each feed stands: the account the checkpoints belong to, the database feed's token, and
/// each zone's token, generation and last error.
public protocol CheckpointStore: Sendable {
    /// The account the checkpoints belong to, and recording it.
    func storedAccount() async throws -> String?
    func storeAccount(_ user: String) async throws

    /// The database feed's token (scope `database`).
    func databaseCheckpoint() async throws -> ChangeToken?
    /// Zones the database feed reported changed that have not been fetched to the end since.
    func pendingZones() async throws -> [ZoneID]
    /// Makes every zone with a checkpoint pending. The database feed's token was refused, and the
    /// feed read again from its start names live zones only: a zone deleted meanwhile is found
    /// only by fetching it (the server no longer knows it).
    func markEveryZonePending() async throws

    /// The zone's checkpoint, created (nil token, generation 1) when missing.
    func zoneCheckpoint(_ zone: ZoneID) async throws -> ZoneCheckpoint
    /// Starts a resync: nil token, next generation, `resyncing` set.
    func beginResync(_ zone: ZoneID, reason: String) async throws -> ZoneCheckpoint
    /// Starts a deletion sweep: `token` (where the sweep starts), next generation, `resyncing`
    /// set, in one commit. The batch that ends the sweep tombstones the rows it left behind.
    func beginSweep(_ zone: ZoneID, token: ChangeToken) async throws -> ZoneCheckpoint
    func recordZoneError(_ zone: ZoneID, message: String?) async throws

    /// Why a zone cannot be kept under its name (its name holds what the store cannot hold);
    /// nil when it can. Such a zone is never followed: it fails in every run that meets it, and
    /// is never stored under a name that could be another zone's.
    func refusal(of zone: ZoneID) -> String?
}

extension CheckpointStore {
    public func refusal(of zone: ZoneID) -> String? { nil }
}
