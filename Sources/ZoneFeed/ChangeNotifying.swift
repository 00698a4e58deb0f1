import CloudKitModel
import Logging

/// A source that can say when something changed (CloudKit: zone subscriptions and the web
/// courier), so that `zonefeed watch` fetches within seconds instead of at the next poll. A hint
/// is never the data: the watcher answers every hint with an ordinary incremental run.
public protocol ChangeNotifying: Sendable {
    /// Makes sure the changes of the zones followed are notified: subscriptions created where
    /// missing, removed for zones that are gone. Idempotent, across restarts and processes.
    func follow(logger: Logger) async throws

    /// Hints until cancelled, one per notification (coalesced by the watcher), one each time it
    /// starts listening (a new push token), and one when the courier first answers that token.
    /// The stream throws
    /// when notifications cannot be had (the push token refused again and again, no courier):
    /// the watcher then polls, and asks again later.
    func changeHints(logger: Logger) -> AsyncThrowingStream<ChangeHint, any Error>
}

/// "Something changed" (in this zone when the notification says which, else somewhere), or
/// news of the listening itself.
public struct ChangeHint: Sendable, Hashable {
    public enum Kind: Sendable, Hashable {
        /// A notification: something changed.
        case change
        /// Listening has (re)started with a new push token: a change made before was notified
        /// to nobody, so look once more.
        case listening
        /// The courier answered a poll of this token for the first time: push works. Until then
        /// a registered token proves nothing (a courier may refuse every poll).
        case confirmed
    }

    public var zone: ZoneID?
    public var kind: Kind

    public init(zone: ZoneID?, kind: Kind = .change) {
        self.zone = zone
        self.kind = kind
    }
}
