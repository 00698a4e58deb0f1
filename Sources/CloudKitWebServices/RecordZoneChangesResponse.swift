/// One page of `records/changes`: the zone's changed records, deletions and per-record errors in
/// feed order, the position after them, and whether more follow.
public struct RecordZoneChangesResponse: Sendable, Hashable, Decodable {
    public var records: [RecordEntry]
    public var syncToken: String
    /// `null` on the wire (observed) counts as false.
    public var moreComing: Bool

    public init(records: [RecordEntry], syncToken: String, moreComing: Bool) {
        self.records = records
        self.syncToken = syncToken
        self.moreComing = moreComing
    }

    enum CodingKeys: String, CodingKey { case records, syncToken, moreComing }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        records = try c.decodeIfPresent([RecordEntry].self, forKey: .records) ?? []
        syncToken = try c.decode(String.self, forKey: .syncToken)
        moreComing = try c.decodeIfPresent(Bool.self, forKey: .moreComing) ?? false
    }
}
