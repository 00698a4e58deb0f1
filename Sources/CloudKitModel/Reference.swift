/// The value of a `REFERENCE` field: the record it points to.
public struct Reference: Sendable, Hashable, Codable {
    public var recordName: String
    public var zoneID: ZoneID?
    /// `NONE`, `DELETE_SELF` or `VALIDATE`.
    public var action: String?

    public init(recordName: String, zoneID: ZoneID? = nil, action: String? = "NONE") {
        self.recordName = recordName
        self.zoneID = zoneID
        self.action = action
    }
}
