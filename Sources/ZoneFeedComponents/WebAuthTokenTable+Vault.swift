import CloudKitWebServices
import ZoneFeedPostgres

/// The destination's token table as the CloudKit client's vault (`auth.webAuthTokenStore:
/// database`). Its saves are commits, durable when they return: nothing is left to sync.
extension WebAuthTokenTable: WebAuthTokenVault {
    public func sync() {}
}
