import CloudKitModel

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
    /// The zone's token before the batch, nil at the start of its feed: the batch commits only
    /// if the zone's checkpoint is still there, so that a batch read twice (by two processes
    /// that both took the zone, its claim lost) is applied once.
    public var from: ChangeToken?
    public var token: ChangeToken
    /// The zone's feed is exhausted (`moreComing` false) after this batch.
    public var isLast: Bool
    /// This batch ends a resync: rows of older generations are swept in the same transaction.
    public var finishesResync: Bool
    /// Records a deletion sweep found still there: their rows join the batch's generation
    /// without being written again.
    public var listed: [ListedRecords] = []
    /// Its place among the zone's batches in this run, from 0: what a batch applied alongside it
    /// waits for (`BatchPosition`).
    public var sequence = 0
    /// The zone's batch before it, when that one may still be in flight: this batch commits only
    /// after it, and only if it committed (its token must be the zone's).
    public var follows: BatchPosition?

    public init(
        zoneID: ZoneID, runID: Int64, generation: Int, pageCount: Int, entries: [RecordEntry],
        from: ChangeToken?, token: ChangeToken, isLast: Bool, finishesResync: Bool
    ) {
        self.zoneID = zoneID
        self.runID = runID
        self.generation = generation
        self.pageCount = pageCount
        self.entries = entries
        self.from = from
        self.token = token
        self.isLast = isLast
        self.finishesResync = finishesResync
    }
}

/// Where a batch stands among its zone's: its number in the run and the token it moves the zone to.
public struct BatchPosition: Sendable, Hashable {
    public var sequence: Int
    public var token: ChangeToken

    public init(sequence: Int, token: ChangeToken) {
        self.sequence = sequence
        self.token = token
    }
}
