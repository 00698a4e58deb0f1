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
