/// A pipeline file, loaded and validated: where changes come from, where they go, and how
/// record types map to tables. Built by `Pipeline.load(path:environment:)`.
public struct Pipeline: Sendable {
    /// The pipeline's name: the key of its checkpoints and runs.
    public var name: String
    public var source: SourceSettings
    public var destination: DestinationSettings
    /// In file order.
    public var recordTypes: [RecordTypeMapping]
    public var unmappedFields: UnmappedFields
    public var unknownRecordTypes: UnknownRecordTypes
    public var onBadRecord: OnBadRecord
    /// The path the file was read from, as given ("<memory>" when parsed from a string).
    public var filePath: String

    public init(
        name: String, source: SourceSettings, destination: DestinationSettings,
        recordTypes: [RecordTypeMapping] = [], unmappedFields: UnmappedFields = .keep,
        unknownRecordTypes: UnknownRecordTypes = .skip, onBadRecord: OnBadRecord = .reject,
        filePath: String = "<memory>"
    ) {
        self.name = name
        self.source = source
        self.destination = destination
        self.recordTypes = recordTypes
        self.unmappedFields = unmappedFields
        self.unknownRecordTypes = unknownRecordTypes
        self.onBadRecord = onBadRecord
        self.filePath = filePath
    }

    public func mapping(forRecordType type: String) -> RecordTypeMapping? {
        recordTypes.first { $0.recordType == type }
    }

    public enum UnmappedFields: String, Sendable, CaseIterable { case keep, drop }
    public enum UnknownRecordTypes: String, Sendable, CaseIterable { case skip, reject }
    public enum OnBadRecord: String, Sendable, CaseIterable { case reject, fail }
}

/// Exactly one source per pipeline.
public enum SourceSettings: Sendable {
    case cloudKit(CloudKitSettings)
    case fake(FakeSettings)
}

public struct CloudKitSettings: Sendable {
    public var baseURL: String = "https://api.apple-cloudkit.com"
    public var container: String
    public var environment: Environment = .production
    public var database: Database = .private
    public var zones: ZoneSelection = .all
    /// 1...200.
    public var resultsLimit: Int = 200
    /// Only these fields are fetched; nil fetches every field.
    public var desiredKeys: [String]?
    public var auth: Auth
    /// Seconds one HTTP request may take.
    public var timeoutSeconds: Double = 60
    /// Retries of throttled or failed requests: at most this many attempts per request...
    public var maxAttempts: Int = 8
    /// ...and no new attempt more than this many seconds after the first one, per request.
    public var retryBudgetSeconds: Double = 300
    /// The most requests in flight at once, across zones; each zone's pages still come one after
    /// another. 16 keeps a backfill 100 ms from CloudKit well past eight times what one request
    /// at a time can fetch (README, "Benchmark").
    public var maxConcurrentRequests: Int = 16

    public enum Environment: String, Sendable, CaseIterable { case development, production }
    public enum Database: String, Sendable, CaseIterable { case `private`, shared }

    public struct Auth: Sendable {
        public var apiToken: Secret?
        public var webAuthToken: Secret?
        /// Where the rotated web auth token is kept between runs (mode 0600); when the file
        /// does not name one, `.zonefeed/<pipeline>.web-auth-token`.
        public var webAuthTokenFile: String?
        /// Whether `webAuthTokenFile` is the default rather than the file's.
        public var webAuthTokenFileIsDefault = false
        /// Server-to-server signing: the key ID from CloudKit Dashboard and a PEM private key file.
        public var serverKeyID: String?
        public var serverPrivateKeyFile: String?

        public init(
            apiToken: Secret? = nil, webAuthToken: Secret? = nil, webAuthTokenFile: String? = nil,
            serverKeyID: String? = nil, serverPrivateKeyFile: String? = nil
        ) {
            self.apiToken = apiToken
            self.webAuthToken = webAuthToken
            self.webAuthTokenFile = webAuthTokenFile
            self.serverKeyID = serverKeyID
            self.serverPrivateKeyFile = serverPrivateKeyFile
        }
    }

    public init(container: String, auth: Auth) {
        self.container = container
        self.auth = auth
    }
}

public enum ZoneSelection: Sendable, Equatable {
    /// Discover zones through the database change feed.
    case all
    case named([String])
}

/// The deterministic generator's settings; the same settings give the same feed, byte for byte.
public struct FakeSettings: Sendable, Hashable {
    public var seed: UInt64 = 42
    public var zones: Int = 3
    /// How many entries (creates, updates, deletions) each zone's feed holds.
    public var recordsPerZone: Int = 10_000
    /// The most entries a page holds (1...200, like `resultsLimit`).
    public var pageSize: Int = 200
    /// When set, every Nth created record carries a value that cannot be applied (alternately a
    /// text with a NUL byte and a `wordCount` sent as a STRING), to exercise the rejects table.
    public var badRecordEvery: Int?
    /// The zones' owner record name.
    public var owner: String = "_fakeOwner"
    /// With churn (the default) the feed updates, deletes and re-creates records; without it
    /// every entry creates a new record, like a snapshot fetched from a nil token (the benchmark).
    public var churn = true

    public init(
        seed: UInt64 = 42, zones: Int = 3, recordsPerZone: Int = 10_000, pageSize: Int = 200, badRecordEvery: Int? = nil,
        churn: Bool = true
    ) {
        self.seed = seed
        self.zones = zones
        self.recordsPerZone = recordsPerZone
        self.pageSize = pageSize
        self.badRecordEvery = badRecordEvery
        self.churn = churn
    }
}

public struct DestinationSettings: Sendable {
    /// A libpq connection string or URI, or `embedded`.
    public var url: Secret
    public var schema: String
    public var deletes: DeleteMode = .tombstone
    /// Records per transaction; whole pages only, so a transaction may hold a little more.
    public var commitEvery: Int = 5_000
    /// How many zones are fetched and applied at once, each on a connection of its own.
    public var parallelZones: Int = DestinationSettings.defaultParallelZones

    /// Two: while one zone's batch is written, another's is fetched, encoded or committed, which
    /// keeps both PostgreSQL and zonefeed busy on a small machine.
    public static let defaultParallelZones = 2

    public enum DeleteMode: String, Sendable, CaseIterable { case tombstone, hard }

    public var isEmbedded: Bool { url.value == "embedded" }

    public init(
        url: Secret, schema: String, deletes: DeleteMode = .tombstone, commitEvery: Int = 5_000,
        parallelZones: Int = DestinationSettings.defaultParallelZones
    ) {
        self.url = url
        self.schema = schema
        self.deletes = deletes
        self.commitEvery = commitEvery
        self.parallelZones = parallelZones
    }
}

public struct RecordTypeMapping: Sendable {
    public var recordType: String
    public var table: String
    public var fields: [FieldMapping]

    public init(recordType: String, table: String, fields: [FieldMapping] = []) {
        self.recordType = recordType
        self.table = table
        self.fields = fields
    }
}

public struct FieldMapping: Sendable, Hashable {
    /// The CloudKit field name.
    public var field: String
    /// The column name (the field name in snake_case unless given).
    public var column: String
    public var type: ColumnType

    public init(field: String, column: String, type: ColumnType) {
        self.field = field
        self.column = column
        self.type = type
    }
}

/// The PostgreSQL types a mapped field can have.
public enum ColumnType: String, Sendable, CaseIterable, Hashable {
    case text
    case bigint
    case doublePrecision = "double precision"
    case timestamptz
    case bytea
    case jsonb
    case boolean
    case textArray = "text[]"
    case bigintArray = "bigint[]"
    case doublePrecisionArray = "double precision[]"
    case timestamptzArray = "timestamptz[]"
    case byteaArray = "bytea[]"

    /// Other spellings PostgreSQL users write for the same types.
    public static let aliases: [String: ColumnType] = [
        "int8": .bigint, "float8": .doublePrecision, "double": .doublePrecision,
        "timestamp with time zone": .timestamptz, "bool": .boolean, "int8[]": .bigintArray,
        "float8[]": .doublePrecisionArray, "double[]": .doublePrecisionArray,
    ]

    /// A type by its name or an alias, ignoring case and surrounding spaces.
    public init?(name: String) {
        let n = name.trimmingSpaces().lowercased()
        if let t = ColumnType(rawValue: n) ?? ColumnType.aliases[n] { self = t } else { return nil }
    }

    /// The column type PRODUCT.md gives for a CloudKit type tag.
    public static func `default`(forTypeTag tag: String) -> ColumnType {
        switch tag {
        case "STRING", "REFERENCE": return .text
        case "INT64": return .bigint
        case "DOUBLE": return .doublePrecision
        case "TIMESTAMP": return .timestamptz
        case "BYTES", "ENCRYPTED_BYTES": return .bytea
        case "STRING_LIST", "REFERENCE_LIST": return .textArray
        case "INT64_LIST": return .bigintArray
        case "DOUBLE_LIST": return .doublePrecisionArray
        case "TIMESTAMP_LIST": return .timestamptzArray
        case "BYTES_LIST": return .byteaArray
        default: return .jsonb
        }
    }
}

/// The columns every record table has; a mapped field may not use these names.
public let systemColumns: [String] = [
    "zone_owner", "zone_name", "record_name", "record_type", "change_tag", "created_at",
    "modified_at", "created_by", "modified_by", "deleted_at", "synced_at", "run_id", "generation",
    "fields",
]

/// A value that must never be printed: tokens, passwords, connection strings.
public struct Secret: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible {
    public var value: String
    public init(_ value: String) { self.value = value }
    public var description: String { "<redacted>" }
    public var debugDescription: String { "<redacted>" }
}

extension String {
    func trimmingSpaces() -> String {
        var s = Substring(self)
        while s.first?.isWhitespace == true { s = s.dropFirst() }
        while s.last?.isWhitespace == true { s = s.dropLast() }
        return String(s)
    }

    /// `wordCount` → `word_count`, `URLString` → `url_string`.
    public var snakeCased: String {
        var out = ""
        let chars = Array(self)
        for (i, c) in chars.enumerated() {
            if c.isUppercase {
                let prevLower = i > 0 && (chars[i - 1].isLowercase || chars[i - 1].isNumber)
                let nextLower = i + 1 < chars.count && chars[i + 1].isLowercase
                let prevUpper = i > 0 && chars[i - 1].isUppercase
                if i > 0 && (prevLower || (prevUpper && nextLower)) && out.last != "_" { out.append("_") }
                out.append(contentsOf: c.lowercased())
            } else if c == "-" || c == " " || c == "." {
                out.append("_")
            } else {
                out.append(c)
            }
        }
        return out
    }
}
