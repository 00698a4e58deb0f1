import ZoneFeed

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

    /// Whether an index on such a column can hold every value: a b-tree on the fixed-size
    /// scalars, a hash on text (a b-tree refuses entries over about 2.7 kB, and would fail every
    /// batch that brings a long one); none on bytea, jsonb or arrays.
    public var isIndexable: Bool { [.text, .bigint, .doublePrecision, .timestamptz, .boolean].contains(self) }

    /// `USING …` for an index on such a column.
    var indexMethod: String { self == .text ? "hash" : "btree" }

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
        case "BYTES_LIST", "ENCRYPTED_BYTES_LIST": return .byteaArray
        default: return .jsonb
        }
    }
}

/// The staging tables' column that keeps a batch's order; no mapped field may use it either.
public let stagingSequenceColumn = "seq"

/// PostgreSQL's own columns of every table ("System Columns" in its manual): a column of one of
/// these names cannot be made (`column name "xmin" conflicts with a system column name`, 42701).
public let postgresSystemColumns: [String] = ["tableoid", "xmin", "cmin", "xmax", "cmax", "ctid"]

/// The columns every record table has; a mapped field may not use these names.
public let systemColumns: [String] = [
    "zone_owner", "zone_name", "record_name", "record_type", "change_tag", "created_at",
    "modified_at", "created_by", "modified_by", "deleted_at", "synced_at", "run_id", "generation",
    "fields",
]
