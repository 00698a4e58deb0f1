import CloudKitModel

/// What changes the rows: each call applies its changes and moves its token in one transaction.
public protocol BatchSink: Sendable {
    /// Applies a batch and its token in one transaction.
    func apply(_ batch: ChangeBatch) async throws -> BatchOutcome
    /// Applies the page's zone deletions (deleted, purged: rows; encrypted-data reset: resync),
    /// marks changed zones as pending and stores the database token, in one transaction. Returns
    /// nil, applying nothing, when the stored token is no longer `previous` (another run moved
    /// the database feed on meanwhile).
    func applyDatabaseChanges(_ page: DatabaseChangePage, after previous: ChangeToken?, runID: Int64) async throws -> BatchOutcome?
    /// Applies a zone's deletion (reason `deleted` or `purged`) and drops its checkpoint.
    func deleteZone(_ deletion: ZoneDeletion, runID: Int64) async throws -> BatchOutcome
}
