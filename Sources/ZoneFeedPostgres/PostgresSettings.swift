import RecordMapping
import ZoneFeed

/// The `destination` section and the top-level keys that say how records become rows:
/// `recordTypes`, read with PostgreSQL's types and names, and the mapping's policies
/// (`schemaEvolution`, `unmappedFields`, `unknownRecordTypes`, `onBadRecord`), read as any
/// destination reads them.
public struct PostgresSettings: Sendable {
    /// A libpq connection string or URI, or `embedded`.
    public var url: Secret
    public var schema: String
    public var deletes: DeleteMode = .tombstone
    /// Records per transaction; whole pages only, so a transaction may hold a little more.
    public var commitEvery: Int = PostgresSettings.defaultCommitEvery
    /// Bytes of pages per transaction, as they came; whole pages only (`Runner.Configuration`).
    public var commitEveryBytes: Int = Runner.Configuration.defaultCommitEveryBytes
    /// How many zones are fetched and applied at once, each on a connection of its own.
    public var parallelZones: Int = PostgresSettings.defaultParallelZones
    /// In file order.
    public var recordTypes: [PostgresRecordTypeMapping]
    /// The CloudKit schema file `recordTypes` were derived from, as resolved; nil when they were
    /// written out.
    public var schemaFile: String?
    /// `recordTypes: auto`: no mapping; a table per record type as it first appears.
    public var autoRecordTypes = false
    /// What becomes of fields, record types and records the mapping does not foresee.
    public var policies: RecordMappingPolicies
    /// How names are made for what evolution adds: a schema file's `stripCoreDataPrefix`.
    public var stripsCoreDataPrefix = false
    /// Record types that never get a table, even when evolving (a schema file's `skip`).
    public var skippedRecordTypes: Set<String> = []
    /// The indexes the schema file declares on system fields (`___modTime SORTABLE`), by mapped
    /// record type; nil when the types were not derived from a schema file.
    public var declaredSystemIndexes: [String: Set<String>]?

    /// Two: while one zone's batch is written, another's is fetched, encoded or committed, which
    /// keeps both PostgreSQL and zonefeed busy on a small machine.
    public static let defaultParallelZones = 2
    /// Records per transaction unless the pipeline says: staging and merging 5,000 rows a
    /// transaction ran at 57-60k rows/s on these machines, 200 rows at 34-38k (perf-notes), and
    /// a killed run fetches again at most one transaction's worth a zone.
    public static let defaultCommitEvery = 5_000

    /// A transaction of up to a million records: batches of that size are held in memory,
    /// one per connection, so more would only risk the memory (docs/pipeline-file.md).
    public static let commitEveryRange = 1...1_000_000
    public static let parallelZonesRange = 1...16
    /// From 1 MiB to 1 GiB: the pages of a batch stay in memory until it commits, one batch per
    /// connection (two for a zone alone on two), besides what is fetched meanwhile.
    public static let commitEveryBytesRange = 1_048_576...1_073_741_824

    public enum DeleteMode: String, Sendable, CaseIterable { case tombstone, hard }

    public var evolves: Bool { policies.evolves }

    public var isEmbedded: Bool { url.value == "embedded" }

    public init(
        url: Secret, schema: String, deletes: DeleteMode = .tombstone, commitEvery: Int = PostgresSettings.defaultCommitEvery,
        parallelZones: Int = PostgresSettings.defaultParallelZones, recordTypes: [PostgresRecordTypeMapping] = [],
        policies: RecordMappingPolicies = RecordMappingPolicies()
    ) {
        self.url = url
        self.schema = schema
        self.deletes = deletes
        self.commitEvery = commitEvery
        self.parallelZones = parallelZones
        self.recordTypes = recordTypes
        self.policies = policies
    }

    public func mapping(forRecordType type: String) -> PostgresRecordTypeMapping? {
        recordTypes.first { $0.recordType == type }
    }
}

extension Pipeline {
    /// The pipeline's PostgreSQL settings; throws when the pipeline was built with another
    /// destination.
    public func postgresSettings() throws -> PostgresSettings {
        try destination(as: PostgresSettings.self)
    }
}
