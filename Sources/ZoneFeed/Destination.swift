import CloudKitModel

/// Where a zone stands: its token, its sync generation and whether a resync is under way.
public struct ZoneCheckpoint: Sendable, Hashable {
    public var token: ChangeToken?
    public var generation: Int
    public var resyncing: Bool

    public init(token: ChangeToken?, generation: Int, resyncing: Bool) {
        self.token = token
        self.generation = generation
        self.resyncing = resyncing
    }
}

public enum RunStatus: String, Sendable { case running, succeeded, failed, interrupted }

/// Where changes go: the four roles a destination plays for the runner. Each batch, with its
/// token, is applied atomically; the destination keeps the checkpoints and the run history.
/// Implementations keep blocking work off the cooperative pool. `MemoryDestination` in the test
/// support plays all four in memory, so the runner is tested without a database.
public typealias Destination = RunLedger & CheckpointStore & ZoneClaims & BatchSink
