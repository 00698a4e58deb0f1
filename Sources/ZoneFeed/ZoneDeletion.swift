import CloudKitModel

/// Why a zone left the database (the sync engine's `CKSyncEngine.Event.FetchedDatabaseChanges`).
public enum ZoneDeletionReason: String, Sendable, CaseIterable {
    case deleted
    case purged
    case encryptedDataReset
}

public struct ZoneDeletion: Sendable, Hashable {
    public var zoneID: ZoneID
    public var reason: ZoneDeletionReason
    public init(zoneID: ZoneID, reason: ZoneDeletionReason) {
        self.zoneID = zoneID
        self.reason = reason
    }
}
