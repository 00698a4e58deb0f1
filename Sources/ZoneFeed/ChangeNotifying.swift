import CloudKitModel
import Logging

/// A source that can say when something changed (CloudKit: zone subscriptions and the web
/// courier), so that `zonefeed watch` fetches within seconds instead of at the next poll. A hint
/// is never the data: the watcher answers every hint with an ordinary incremental run.
public protocol ChangeNotifying: Sendable {
    /// Makes sure the changes of the zones followed are notified: subscriptions created where
    /// missing, removed for zones that are gone. Idempotent, across restarts and processes.
    func follow(logger: Logger) async throws

    /// Hints until cancelled, one per notification (coalesced by the watcher), and one each time
    /// it starts listening (a new push token): a change made before then was notified to nobody,
    /// so the watcher must look once more. The stream throws
    /// when notifications cannot be had (the push token refused again and again, no courier):
    /// the watcher then polls, and asks again later.
    func changeHints(logger: Logger) -> AsyncThrowingStream<ChangeHint, any Error>
}

/// "Something changed": in this zone when the notification says which, else somewhere.
public struct ChangeHint: Sendable, Hashable {
    public var zone: ZoneID?

    public init(zone: ZoneID?) {
        self.zone = zone
    }
}
