import CloudKitModel

/// One page of a zone's change feed, as `records/changes` returns it, or one round of a zone
/// read by query (`records/query`), which a source presents the same way.
public struct ZoneChangePage: Sendable {
    public var zoneID: ZoneID
    public var entries: [RecordEntry]
    /// The position after this page.
    public var syncToken: ChangeToken
    public var moreComing: Bool
    /// A deletion sweep begins with this page, which holds nothing else: the engine commits
    /// what it holds, then starts a new generation of the zone's rows with this page's token
    /// (`CheckpointStore.beginSweep`). The sweep's pages list the records still there
    /// (`listed`); the page that ends it says no more are coming, and the rows it did not list
    /// are tombstoned in that batch, as after a resync.
    public var beginsSweep = false
    /// Records a deletion sweep found still there, by name only: their rows are kept.
    public var listed: [ListedRecords] = []
    /// The bytes the page came in (a response's body), which its entries may keep alive until
    /// their batch is written: what a batch's pages add up to is bounded by them
    /// (`Runner.Configuration.commitEveryBytes`). 0 when the source does not know.
    public var byteCount = 0

    public init(zoneID: ZoneID, entries: [RecordEntry], syncToken: ChangeToken, moreComing: Bool) {
        self.zoneID = zoneID
        self.entries = entries
        self.syncToken = syncToken
        self.moreComing = moreComing
    }
}

/// Names of records of one type that a deletion sweep found still there.
public struct ListedRecords: Sendable, Hashable {
    public let recordType: String
    public let names: [String]
    /// Each name's version as listed (nil when the listing gave none, such as an error entry of
    /// the record's own), beside `names`: as many.
    public let changeTags: [String?]

    public init(recordType: String, names: [String], changeTags: [String?]? = nil) {
        precondition(changeTags.map { $0.count == names.count } ?? true, "a change tag for each name listed")
        self.recordType = recordType
        self.names = names
        self.changeTags = changeTags ?? Array(repeating: nil, count: names.count)
    }
}
