import CloudKitModel

/// What changes the rows: each call applies its changes and moves its token in one transaction.
public protocol BatchSink: Sendable {
    /// Applies a batch and its token in one transaction.
    func apply(_ batch: ChangeBatch) async throws -> BatchOutcome
    /// Whether a zone's next batch could be applied on another connection while its last one is
    /// on the zone's own: one that no other zone holds and that applies nothing now.
    func hasSpareConnection(for zone: ZoneID) -> Bool
    /// Reserves for one `apply(_:on:)` a connection on which a zone's next batch can be applied
    /// while its last one still is on `inUse` (the zone's own connection when nil): one that no
    /// other zone holds and that applies nothing now; nil when there is none.
    func reserveSpareConnection(for zone: ZoneID, besides inUse: SpareConnection?) -> SpareConnection?
    /// Applies a batch that `follows` another, on a spare connection, while that one may still be
    /// in flight: it commits after it, or not at all. Ends the reservation.
    func apply(_ batch: ChangeBatch, on spare: SpareConnection) async throws -> BatchOutcome
    /// Applies the page's zone deletions (deleted, purged: rows; encrypted-data reset: resync),
    /// marks changed zones as pending and stores the database token, in one transaction. Returns
    /// nil, applying nothing, when the stored token is no longer `previous` (another run moved
    /// the database feed on meanwhile).
    func applyDatabaseChanges(_ page: DatabaseChangePage, after previous: ChangeToken?, runID: Int64) async throws -> BatchOutcome?
    /// Applies a zone's deletion (reason `deleted` or `purged`) and drops its checkpoint.
    func deleteZone(_ deletion: ZoneDeletion, runID: Int64) async throws -> BatchOutcome
    /// Of the names a deletion sweep listed, those without a live row (records the reads before
    /// missed), for the engine to fetch by name before it applies the sweep's batch. Reads only.
    func listedWithoutRows(_ listed: [ListedRecords], in zone: ZoneID) async throws -> [ListedRecords]
}

/// A destination's connection reserved for one batch (`BatchSink.reserveSpareConnection`): the
/// destination's own name for it, which the engine only hands back.
public struct SpareConnection: Sendable, Hashable {
    public let id: Int

    public init(id: Int) { self.id = id }
}

extension BatchSink {
    /// A destination that applies one batch of a zone at a time has none to spare.
    public func hasSpareConnection(for zone: ZoneID) -> Bool { false }

    public func reserveSpareConnection(for zone: ZoneID, besides inUse: SpareConnection?) -> SpareConnection? { nil }

    public func apply(_ batch: ChangeBatch, on spare: SpareConnection) async throws -> BatchOutcome {
        try await apply(batch)
    }

    /// A destination that cannot tell gives none: the sweep marks what it finds, as before.
    public func listedWithoutRows(_ listed: [ListedRecords], in zone: ZoneID) async throws -> [ListedRecords] { [] }
}
