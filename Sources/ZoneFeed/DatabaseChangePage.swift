import CloudKitModel

/// One page of the database change feed (`changes/database`): which zones changed or went away.
public struct DatabaseChangePage: Sendable {
    public var modifiedZones: [ZoneID]
    public var deletedZones: [ZoneDeletion]
    public var syncToken: ChangeToken
    public var moreComing: Bool
    /// Zones the feed named that cannot be followed as named (a name that is not valid text,
    /// say), with why: each fails, in every run that meets it, and none is merged with another.
    public var refusedZones: [RefusedZone]

    public init(
        modifiedZones: [ZoneID], deletedZones: [ZoneDeletion], syncToken: ChangeToken, moreComing: Bool, refusedZones: [RefusedZone] = []
    ) {
        self.modifiedZones = modifiedZones
        self.deletedZones = deletedZones
        self.syncToken = syncToken
        self.moreComing = moreComing
        self.refusedZones = refusedZones
    }
}

/// A zone that is not exported, and why; `zoneID` may hold a repaired form of its name, for
/// the sentence only.
public struct RefusedZone: Sendable, Hashable {
    public var zoneID: ZoneID
    public var reason: String

    public init(zoneID: ZoneID, reason: String) {
        self.zoneID = zoneID
        self.reason = reason
    }
}
