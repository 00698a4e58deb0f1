import CloudKitModel

/// Which run applies a zone: two runs of one pipeline (overlapping cron jobs) never apply the
/// same zone at once. A claim vanishes with the process that holds it.
public protocol ZoneClaims: Sendable {
    /// Claims a zone for this process; false when another run holds it.
    func claimZone(_ zone: ZoneID) async throws -> Bool
    func releaseZone(_ zone: ZoneID) async throws
}
