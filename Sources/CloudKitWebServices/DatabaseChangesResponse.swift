/// One page of `changes/database`: the zones that changed or went away since the database token.
public struct DatabaseChangesResponse: Sendable, Hashable, Decodable {
    public var zones: [ZoneChange]
    public var syncToken: String
    /// `null` counts as false.
    public var moreComing: Bool

    public init(zones: [ZoneChange], syncToken: String, moreComing: Bool) {
        self.zones = zones
        self.syncToken = syncToken
        self.moreComing = moreComing
    }

    enum CodingKeys: String, CodingKey { case zones, syncToken, moreComing }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        zones = try c.decodeIfPresent([ZoneChange].self, forKey: .zones) ?? []
        syncToken = try c.decode(String.self, forKey: .syncToken)
        moreComing = try c.decodeIfPresent(Bool.self, forKey: .moreComing) ?? false
    }
}

/// One zone of the database feed. REST documents only `deleted: true`; `purged` and
/// `encryptedDataReset` are the native API's reasons, which the fake server sends too. An entry
/// may also be a zone fetch error (`serverErrorCode`, `reason`).
public struct ZoneChange: Sendable, Hashable, Decodable {
    public var zoneID: ZoneID
    public var deleted: Bool
    public var purged: Bool
    public var encryptedDataReset: Bool
    /// Set when the entry is an error rather than a change.
    public var serverErrorCode: String?
    public var reason: String?
    /// The zone's name or owner is not valid UTF-8 text: `zoneID` holds it with U+FFFD in place
    /// of what could not be read, which may be another zone's name; it must not be followed.
    public var unreadableName = false

    public init(
        zoneID: ZoneID, deleted: Bool = false, purged: Bool = false, encryptedDataReset: Bool = false,
        serverErrorCode: String? = nil, reason: String? = nil
    ) {
        self.zoneID = zoneID
        self.deleted = deleted
        self.purged = purged
        self.encryptedDataReset = encryptedDataReset
        self.serverErrorCode = serverErrorCode
        self.reason = reason
    }

    enum CodingKeys: String, CodingKey { case zoneID, deleted, purged, encryptedDataReset, serverErrorCode, reason }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        zoneID = try c.decode(ZoneID.self, forKey: .zoneID)
        deleted = try c.decodeIfPresent(Bool.self, forKey: .deleted) ?? false
        purged = try c.decodeIfPresent(Bool.self, forKey: .purged) ?? false
        encryptedDataReset = try c.decodeIfPresent(Bool.self, forKey: .encryptedDataReset) ?? false
        serverErrorCode = try c.decodeIfPresent(String.self, forKey: .serverErrorCode)
        // A reason of another type (`"reason": 7`) is left out, as in a failed request's body,
        // where it made the database's whole page malformed.
        reason = try? c.decodeIfPresent(String.self, forKey: .reason)
    }
}

extension DatabaseChangesResponse: JSONReadable {
    /// The page straight from its bytes, with the meaning of `init(from:)`, noting zones whose
    /// names are not valid text.
    public init(reading json: inout JSONReader) throws {
        let page = try json.readChangesPage(items: "zones") { try ZoneChange(reading: &$0) }
        self.init(zones: page.items, syncToken: page.syncToken, moreComing: page.moreComing)
    }
}

extension ZoneChange {
    init(reading json: inout JSONReader) throws {
        var zoneID: ZoneID?
        var unreadable = false
        var change = ZoneChange(zoneID: ZoneID(zoneName: ""))
        try json.beginObject()
        while let key = try json.nextKey() {
            if try json.readNullIfPresent() { continue }
            switch key {
            case "zoneID":
                let repairs = json.repairedStrings
                zoneID = try ZoneID(reading: &json)
                unreadable = json.repairedStrings != repairs
            case "deleted": change.deleted = try json.readBool()
            case "purged": change.purged = try json.readBool()
            case "encryptedDataReset": change.encryptedDataReset = try json.readBool()
            case "serverErrorCode": change.serverErrorCode = try json.readString()
            case "reason": change.reason = try json.readValidStringOrPass()  // as `init(from:)` reads it
            default: try json.skipValue()
            }
        }
        guard let zoneID else { throw json.failure("a zone entry without a zoneID") }
        change.zoneID = zoneID
        change.unreadableName = unreadable
        self = change
    }
}
