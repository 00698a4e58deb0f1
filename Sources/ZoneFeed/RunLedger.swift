/// The history of runs: what `zonefeed status` lists, and what tells a crashed run from a live one.
public protocol RunLedger: Sendable {
    /// Creates what is missing (schema, tables, views); safe to run concurrently.
    func prepare() async throws
    /// Records a new run as `running` and returns its ID.
    func startRun() async throws -> Int64
    /// Records how the run ended, and how long it waited because the source was throttled.
    func finishRun(_ runID: Int64, status: RunStatus, error: String?, throttledSeconds: Double) async throws
}
