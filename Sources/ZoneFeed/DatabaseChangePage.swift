import CloudKitModel

/// One page of the database change feed (`changes/database`): which zones changed or went away.
public struct DatabaseChangePage: Sendable {
    public var modifiedZones: [ZoneID]
    public var deletedZones: [ZoneDeletion]
    public var syncToken: ChangeToken
    public var moreComing: Bool

    public init(modifiedZones: [ZoneID], deletedZones: [ZoneDeletion], syncToken: ChangeToken, moreComing: Bool) {
        self.modifiedZones = modifiedZones
        self.deletedZones = deletedZones
        self.syncToken = syncToken
        self.moreComing = moreComing
    }
}
