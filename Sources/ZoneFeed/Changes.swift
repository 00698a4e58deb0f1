import CloudKitModel

/// One page of a zone's change feed, as `records/changes` returns it.
public struct ZoneChangePage: Sendable {
    public var zoneID: ZoneID
    public var entries: [RecordEntry]
    /// The position after this page.
    public var syncToken: ChangeToken
    public var moreComing: Bool

    public init(zoneID: ZoneID, entries: [RecordEntry], syncToken: ChangeToken, moreComing: Bool) {
        self.zoneID = zoneID
        self.entries = entries
        self.syncToken = syncToken
        self.moreComing = moreComing
    }
}

/// Why a zone left the database (the sync engine's `CKSyncEngine.Event.FetchedDatabaseChanges`).
public enum ZoneDeletionReason: String, Sendable, CaseIterable {
    case deleted
    case purged
    case encryptedDataReset
}

public struct ZoneDeletion: Sendable, Hashable {
    public var zoneID: ZoneID
    public var reason: ZoneDeletionReason
    public init(zoneID: ZoneID, reason: ZoneDeletionReason) {
        self.zoneID = zoneID
        self.reason = reason
    }
}

/// One page of the database change feed (`changes/database`): which zones changed or went away.
public struct DatabaseChangePage: Sendable {
    public var modifiedZones: [ZoneID]
    public var deletedZones: [ZoneDeletion]
    public var syncToken: ChangeToken
    public var moreComing: Bool

    public init(modifiedZones: [ZoneID], deletedZones: [ZoneDeletion], syncToken: ChangeToken, moreComing: Bool) {
        self.modifiedZones = modifiedZones
        self.deletedZones = deletedZones
        self.syncToken = syncToken
        self.moreComing = moreComing
    }
}

/// The pages of one zone that the destination applies in one transaction, with the token after
/// the last of them.
public struct ChangeBatch: Sendable {
    public var zoneID: ZoneID
    public var runID: Int64
    /// The zone's sync generation: every row this batch writes is stamped with it.
    public var generation: Int
    public var pageCount: Int
    /// The pages' entries, in feed order.
    public var entries: [RecordEntry]
    public var token: ChangeToken
    /// The zone's feed is exhausted (`moreComing` false) after this batch.
    public var isLast: Bool
    /// This batch ends a resync: rows of older generations are swept in the same transaction.
    public var finishesResync: Bool

    public init(
        zoneID: ZoneID, runID: Int64, generation: Int, pageCount: Int, entries: [RecordEntry],
        token: ChangeToken, isLast: Bool, finishesResync: Bool
    ) {
        self.zoneID = zoneID
        self.runID = runID
        self.generation = generation
        self.pageCount = pageCount
        self.entries = entries
        self.token = token
        self.isLast = isLast
        self.finishesResync = finishesResync
    }
}

/// What applying a batch did.
public struct BatchOutcome: Sendable, Hashable {
    public var pages = 0
    public var upserts = 0
    public var tombstones = 0
    public var rejects = 0
    /// Records of unmapped types, skipped by `unknownRecordTypes: skip`.
    public var skipped = 0
    /// Rows tombstoned by a resync sweep.
    public var swept = 0

    public init() {}

    public static func += (lhs: inout BatchOutcome, rhs: BatchOutcome) {
        lhs.pages += rhs.pages
        lhs.upserts += rhs.upserts
        lhs.tombstones += rhs.tombstones
        lhs.rejects += rhs.rejects
        lhs.skipped += rhs.skipped
        lhs.swept += rhs.swept
    }

    public var records: Int { upserts + tombstones + rejects + skipped }
}
