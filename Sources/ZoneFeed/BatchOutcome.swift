import CloudKitModel

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
    /// Records that came again with the change tag their row already has: not written again
    /// (a query zone's lag reads some records twice).
    public var unchanged = 0

    public init() {}

    public static func += (lhs: inout BatchOutcome, rhs: BatchOutcome) {
        lhs.pages += rhs.pages
        lhs.upserts += rhs.upserts
        lhs.tombstones += rhs.tombstones
        lhs.rejects += rhs.rejects
        lhs.skipped += rhs.skipped
        lhs.swept += rhs.swept
        lhs.unchanged += rhs.unchanged
    }

    /// What the batch changed; records that came unchanged are not among them.
    public var records: Int { upserts + tombstones + rejects + skipped }
}
