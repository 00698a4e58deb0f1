/// A zone as `zones/list` returns it: its ID and its current position (a zone token that starts
/// a feed at "now", skipping the backfill).
public struct ZoneInfo: Sendable, Hashable, Decodable {
    public var zoneID: ZoneID
    public var syncToken: String?
    public var atomic: Bool?

    public init(zoneID: ZoneID, syncToken: String? = nil, atomic: Bool? = nil) {
        self.zoneID = zoneID
        self.syncToken = syncToken
        self.atomic = atomic
    }
}

/// `{zones: [...]}`; entries that are zone errors (they carry `serverErrorCode`) are set apart.
struct ZoneListResponse: Decodable {
    var zones: [ZoneInfo]
    var errors: [ServerErrorBody]

    enum CodingKeys: String, CodingKey { case zones }
    enum EntryKeys: String, CodingKey { case serverErrorCode }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        zones = []
        errors = []
        guard c.contains(.zones), try !c.decodeNil(forKey: .zones) else { return }
        var list = try c.nestedUnkeyedContainer(forKey: .zones)
        while !list.isAtEnd {
            let entry = try list.superDecoder()
            if try entry.container(keyedBy: EntryKeys.self).contains(.serverErrorCode) {
                errors.append(try ServerErrorBody(from: entry))
            } else {
                zones.append(try ZoneInfo(from: entry))
            }
        }
    }
}
