import ZoneFeed

/// The `destination` section and the top-level keys that say how records become rows:
/// `recordTypes`, `unmappedFields`, `unknownRecordTypes` and `onBadRecord`.
public struct PostgresSettings: Sendable {
    /// A libpq connection string or URI, or `embedded`.
    public var url: Secret
    public var schema: String
    public var deletes: DeleteMode = .tombstone
    /// Records per transaction; whole pages only, so a transaction may hold a little more.
    public var commitEvery: Int = PostgresSettings.defaultCommitEvery
    /// How many zones are fetched and applied at once, each on a connection of its own.
    public var parallelZones: Int = PostgresSettings.defaultParallelZones
    /// In file order.
    public var recordTypes: [RecordTypeMapping]
    /// The CloudKit schema file `recordTypes` were derived from, as resolved; nil when they were
    /// written out.
    public var schemaFile: String?
    /// `recordTypes: auto`: no mapping; a table per record type as it first appears.
    public var autoRecordTypes = false
    /// Whether fields and record types the mapping lacks become columns and tables as they
    /// appear (`evolve`) or go to the `fields` column and `unknownRecordTypes` (`freeze`).
    public var schemaEvolution: SchemaEvolution = .freeze
    /// How names are made for what evolution adds: a schema file's `stripCoreDataPrefix`.
    public var stripsCoreDataPrefix = false
    /// Record types that never get a table, even when evolving (a schema file's `skip`).
    public var skippedRecordTypes: Set<String> = []
    public var unmappedFields: UnmappedFields
    public var unknownRecordTypes: UnknownRecordTypes
    public var onBadRecord: OnBadRecord

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

    public enum DeleteMode: String, Sendable, CaseIterable { case tombstone, hard }
    public enum UnmappedFields: String, Sendable, CaseIterable { case keep, drop }
    public enum UnknownRecordTypes: String, Sendable, CaseIterable { case skip, reject }
    public enum OnBadRecord: String, Sendable, CaseIterable { case reject, fail }
    public enum SchemaEvolution: String, Sendable, CaseIterable { case evolve, freeze }

    /// `evolve` when the tables come from a schema file or from the records themselves (such
    /// schemas only grow, and so must their tables); `freeze` when every column is written out.
    public static func defaultSchemaEvolution(schemaFile: String?, auto: Bool) -> SchemaEvolution {
        schemaFile != nil || auto ? .evolve : .freeze
    }

    public var evolves: Bool { schemaEvolution == .evolve }

    public var isEmbedded: Bool { url.value == "embedded" }

    public init(
        url: Secret, schema: String, deletes: DeleteMode = .tombstone, commitEvery: Int = PostgresSettings.defaultCommitEvery,
        parallelZones: Int = PostgresSettings.defaultParallelZones, recordTypes: [RecordTypeMapping] = [],
        unmappedFields: UnmappedFields = .keep, unknownRecordTypes: UnknownRecordTypes = .skip,
        onBadRecord: OnBadRecord = .reject
    ) {
        self.url = url
        self.schema = schema
        self.deletes = deletes
        self.commitEvery = commitEvery
        self.parallelZones = parallelZones
        self.recordTypes = recordTypes
        self.unmappedFields = unmappedFields
        self.unknownRecordTypes = unknownRecordTypes
        self.onBadRecord = onBadRecord
    }

    public func mapping(forRecordType type: String) -> RecordTypeMapping? {
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
