/// What `zonefeed status` shows of a pipeline, as its destination reports it: where it writes,
/// each zone's checkpoint and rows, the last runs, and tables of its own (PostgreSQL: the last
/// changes of shape).
public struct PipelineStatus: Sendable {
    public struct Zone: Sendable {
        /// `zone`, or `database` for the database feed's own checkpoint.
        public var scope: String
        public var zoneOwner: String
        public var zoneName: String
        public var hasToken: Bool
        public var generation: Int
        public var resyncing: Bool
        public var pending: Bool
        public var recordsApplied: Int64
        public var updatedAt: String
        public var lastError: String?
        public var liveRows: Int64
        public var deletedRows: Int64

        public init(
            scope: String, zoneOwner: String, zoneName: String, hasToken: Bool, generation: Int, resyncing: Bool, pending: Bool,
            recordsApplied: Int64, updatedAt: String, lastError: String?, liveRows: Int64, deletedRows: Int64
        ) {
            self.scope = scope
            self.zoneOwner = zoneOwner
            self.zoneName = zoneName
            self.hasToken = hasToken
            self.generation = generation
            self.resyncing = resyncing
            self.pending = pending
            self.recordsApplied = recordsApplied
            self.updatedAt = updatedAt
            self.lastError = lastError
            self.liveRows = liveRows
            self.deletedRows = deletedRows
        }
    }

    public struct Run: Sendable {
        public var runID: Int64
        public var status: String
        public var startedAt: String
        public var finishedAt: String?
        public var pages: Int64
        public var upserts: Int64
        public var tombstones: Int64
        public var rejects: Int64
        /// How long its requests were paused by throttling, in seconds.
        public var throttledSeconds: Double
        public var error: String?

        public init(
            runID: Int64, status: String, startedAt: String, finishedAt: String?, pages: Int64, upserts: Int64, tombstones: Int64,
            rejects: Int64, throttledSeconds: Double, error: String?
        ) {
            self.runID = runID
            self.status = status
            self.startedAt = startedAt
            self.finishedAt = finishedAt
            self.pages = pages
            self.upserts = upserts
            self.tombstones = tombstones
            self.rejects = rejects
            self.throttledSeconds = throttledSeconds
            self.error = error
        }
    }

    /// A table of the destination's own under the runs: a title, then rows whose first is the
    /// header. Its cells are escaped where they are printed.
    public struct Table: Sendable {
        public var title: String
        public var rows: [[String]]

        public init(title: String, rows: [[String]]) {
            self.title = title
            self.rows = rows
        }
    }

    /// Where the pipeline's data is, for the heading (`schema analytics`).
    public var place: String
    /// Lines under the heading about the destination itself (where an embedded server keeps
    /// its files, and how to remove them).
    public var notes: [String] = []
    public var zones: [Zone] = []
    public var runs: [Run] = []
    public var tables: [Table] = []
    /// False before the first run made the destination's tables.
    public var tablesExist = true

    public init(place: String) {
        self.place = place
    }
}
