/// A record zone's identity. PostgreSQL rows are keyed on (`ownerRecordName`, `zoneName`).
public struct ZoneID: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The zone's name; `_defaultZone` is the default zone, which has no change feed.
    public var zoneName: String
    /// The owner; CloudKit defaults it to the caller (`__defaultOwner__` when unknown).
    public var ownerRecordName: String
    /// `REGULAR_CUSTOM_ZONE` or `DEFAULT_ZONE` when the server says so (observed, not documented).
    public var zoneType: String?

    public static let defaultOwner = "__defaultOwner__"
    /// The zone every database has, with no change feed: read by query.
    public static let defaultZoneName = "_defaultZone"

    public init(zoneName: String, ownerRecordName: String = ZoneID.defaultOwner, zoneType: String? = nil) {
        self.zoneName = zoneName
        self.ownerRecordName = ownerRecordName
        self.zoneType = zoneType
    }

    public var description: String {
        ownerRecordName == ZoneID.defaultOwner ? zoneName : "\(zoneName) (owner \(ownerRecordName))"
    }

    // Two IDs name the same zone whatever the server says of its type, when their names are
    // the same bytes (`ExactName`): zones named `Café` and `Cafe` with a combining accent are
    // two zones to CloudKit and to their rows, and shared one zone's state when compared as
    // Strings.
    public static func == (lhs: ZoneID, rhs: ZoneID) -> Bool {
        ExactName.same(lhs.zoneName, rhs.zoneName) && ExactName.same(lhs.ownerRecordName, rhs.ownerRecordName)
    }

    public func hash(into hasher: inout Hasher) {
        ExactName.hash(zoneName, into: &hasher)
        ExactName.hash(ownerRecordName, into: &hasher)
    }

    enum CodingKeys: String, CodingKey { case zoneName, ownerRecordName, zoneType }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        zoneName = try c.decode(String.self, forKey: .zoneName)
        ownerRecordName = try c.decodeIfPresent(String.self, forKey: .ownerRecordName) ?? ZoneID.defaultOwner
        zoneType = try c.decodeIfPresent(String.self, forKey: .zoneType)
    }
}
