import LibPQ

/// The shape zonefeed needs of the tables it writes, and what a table already there lacks of it.
/// A table of the same name made by someone else (or by hand, or of another shape) is named, with
/// what it has and what is needed, before anything is written, instead of failing mid-batch with
/// `column "account_user" does not exist` or `invalid byte sequence … 0x00` (binary COPY into a
/// column of another type).
extension PostgresSchema {
    /// A column: its name, its type as PostgreSQL's `format_type` spells it, and the rest of its
    /// definition.
    struct ColumnSpec: Sendable {
        var name: String
        var type: String
        var rest: String = ""
        /// Added to the table after it was first made: `ddl` adds it to an older table, so a
        /// table without it is not of another shape.
        var addedLater = false
        /// A name from the pipeline (a mapped field's column), quoted in DDL.
        var quoted = false
    }

    /// One of zonefeed's own tables: its columns, then its table constraints.
    struct TableSpec: Sendable {
        var columns: [ColumnSpec]
        var constraints: [String] = []

        /// The columns of the primary key given as a table constraint, in its order: what its
        /// upserts' `ON CONFLICT` names, which needs a unique index on exactly them.
        var key: [String]? {
            for constraint in constraints where constraint.hasPrefix("PRIMARY KEY (") && constraint.hasSuffix(")") {
                let inner = constraint.dropFirst("PRIMARY KEY (".count).dropLast()
                return inner.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            }
            return nil
        }

        func create(_ qualifiedName: String) -> String {
            let lines = columns.map { "\($0.quoted ? quoteIdentifier($0.name) : $0.name) \($0.ddlType)\($0.rest.isEmpty ? "" : " " + $0.rest)" } + constraints
            return "CREATE TABLE IF NOT EXISTS \(qualifiedName) (\n    " + lines.joined(separator: ",\n    ") + "\n)"
        }
    }

    static let checkpointsTable = TableSpec(
        columns: [
            ColumnSpec(name: "pipeline", type: "text", rest: "NOT NULL"),
            ColumnSpec(name: "scope", type: "text", rest: "NOT NULL CHECK (scope IN ('database', 'zone'))"),
            ColumnSpec(name: "zone_owner", type: "text", rest: "NOT NULL DEFAULT ''"),
            ColumnSpec(name: "zone_name", type: "text", rest: "NOT NULL DEFAULT ''"),
            ColumnSpec(name: "token", type: "text"),
            ColumnSpec(name: "generation", type: "integer", rest: "NOT NULL DEFAULT 1"),
            ColumnSpec(name: "resyncing", type: "boolean", rest: "NOT NULL DEFAULT false"),
            ColumnSpec(name: "pending", type: "boolean", rest: "NOT NULL DEFAULT true"),
            ColumnSpec(name: "pending_seq", type: "bigint", rest: "NOT NULL DEFAULT 0"),
            ColumnSpec(name: "records_applied", type: "bigint", rest: "NOT NULL DEFAULT 0"),
            ColumnSpec(name: "updated_at", type: "timestamp with time zone", rest: "NOT NULL DEFAULT now()"),
            ColumnSpec(name: "last_error", type: "text"),
            ColumnSpec(name: "account_user", type: "text"),
            // Drawn anew for every checkpoint row made: a zone deleted and made again gets a new
            // row, whose generation starts at 1 again, and a batch read from the old zone must
            // not commit into it (`moveCheckpoint` fences on it).
            ColumnSpec(name: "incarnation", type: "bigint", rest: "NOT NULL DEFAULT \(PostgresSchema.newIncarnation)", addedLater: true),
        ],
        constraints: ["PRIMARY KEY (pipeline, scope, zone_owner, zone_name)"])

    /// A random 63-bit number: two rows of one zone drawing the same is a chance of 1 in 2^63.
    static let newIncarnation = "(floor(random() * 9223372036854775807))::bigint"

    static let runsTable = TableSpec(columns: [
        ColumnSpec(name: "run_id", type: "bigint", rest: "PRIMARY KEY"),
        ColumnSpec(name: "pipeline", type: "text", rest: "NOT NULL"),
        ColumnSpec(name: "started_at", type: "timestamp with time zone", rest: "NOT NULL DEFAULT now()"),
        ColumnSpec(name: "finished_at", type: "timestamp with time zone"),
        ColumnSpec(name: "status", type: "text", rest: "NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'succeeded', 'failed', 'interrupted'))"),
        ColumnSpec(name: "pages", type: "bigint", rest: "NOT NULL DEFAULT 0"),
        ColumnSpec(name: "upserts", type: "bigint", rest: "NOT NULL DEFAULT 0"),
        ColumnSpec(name: "tombstones", type: "bigint", rest: "NOT NULL DEFAULT 0"),
        ColumnSpec(name: "rejects", type: "bigint", rest: "NOT NULL DEFAULT 0"),
        ColumnSpec(name: "skipped", type: "bigint", rest: "NOT NULL DEFAULT 0"),
        ColumnSpec(name: "error", type: "text"),
        ColumnSpec(name: "hostname", type: "text"),
        ColumnSpec(name: "pid", type: "integer"),
        ColumnSpec(name: "throttled_seconds", type: "double precision", rest: "NOT NULL DEFAULT 0", addedLater: true),
    ])

    static let tombstonesTable = TableSpec(columns: [
        ColumnSpec(name: "id", type: "bigint", rest: "PRIMARY KEY"),
        ColumnSpec(name: "pipeline", type: "text", rest: "NOT NULL"),
        ColumnSpec(name: "zone_owner", type: "text", rest: "NOT NULL"),
        ColumnSpec(name: "zone_name", type: "text", rest: "NOT NULL"),
        ColumnSpec(name: "record_name", type: "text", rest: "NOT NULL"),
        ColumnSpec(name: "record_type", type: "text"),
        ColumnSpec(name: "reason", type: "text", rest: "NOT NULL CHECK (reason IN ('deleted', 'zone_deleted', 'zone_purged', 'resync'))"),
        ColumnSpec(name: "deleted_at", type: "timestamp with time zone", rest: "NOT NULL DEFAULT now()"),
        ColumnSpec(name: "run_id", type: "bigint", rest: "NOT NULL"),
    ])

    static let rejectsTable = TableSpec(columns: [
        ColumnSpec(name: "id", type: "bigint", rest: "PRIMARY KEY"),
        ColumnSpec(name: "pipeline", type: "text", rest: "NOT NULL"),
        ColumnSpec(name: "zone_owner", type: "text", rest: "NOT NULL"),
        ColumnSpec(name: "zone_name", type: "text", rest: "NOT NULL"),
        ColumnSpec(name: "record_name", type: "text"),
        ColumnSpec(name: "record_type", type: "text"),
        ColumnSpec(name: "raw", type: "jsonb"),
        ColumnSpec(name: "error", type: "text", rest: "NOT NULL"),
        ColumnSpec(name: "rejected_at", type: "timestamp with time zone", rest: "NOT NULL DEFAULT now()"),
        ColumnSpec(name: "run_id", type: "bigint", rest: "NOT NULL"),
    ])

    static let schemaChangesTable = TableSpec(columns: [
        ColumnSpec(name: "id", type: "bigint", rest: "PRIMARY KEY"),
        ColumnSpec(name: "pipeline", type: "text", rest: "NOT NULL"),
        ColumnSpec(name: "changed_at", type: "timestamp with time zone", rest: "NOT NULL DEFAULT now()"),
        ColumnSpec(name: "run_id", type: "bigint", rest: "NOT NULL"),
        ColumnSpec(name: "change", type: "text", rest: "NOT NULL CHECK (change IN ('table_created', 'column_added'))"),
        ColumnSpec(name: "record_type", type: "text", rest: "NOT NULL"),
        ColumnSpec(name: "table_name", type: "text", rest: "NOT NULL"),
        ColumnSpec(name: "field", type: "text"),
        ColumnSpec(name: "column_name", type: "text"),
        ColumnSpec(name: "column_type", type: "text"),
        ColumnSpec(name: "cloudkit_type", type: "text", addedLater: true),
        ColumnSpec(name: "why", type: "text", rest: "NOT NULL"),
    ])

    /// The pipeline that writes each record type's table (`claimTables`).
    static let tableOwnersTable = TableSpec(
        columns: [
            ColumnSpec(name: "table_name", type: "text", rest: "NOT NULL"),
            ColumnSpec(name: "pipeline", type: "text", rest: "NOT NULL"),
            ColumnSpec(name: "claimed_at", type: "timestamp with time zone", rest: "NOT NULL DEFAULT now()"),
        ],
        constraints: ["PRIMARY KEY (table_name)"])

    /// PostgreSQL's most columns in a table ("tables can have at most 1600 columns").
    static let maxColumns = 1_600

    /// The most fields one record type may map: its table's own columns and `fields` take the
    /// rest. A mapping of more was taken, and every run failed at CREATE TABLE with PostgreSQL's
    /// words and no place in the file.
    public static var maxMappedFields: Int { maxColumns - recordTableColumns.count - 1 }

    /// The most record types a pipeline file or schema file may map. A run makes every missing
    /// table in one transaction, each holding about four of PostgreSQL's locks until it commits,
    /// from a lock table of 6,400 by default shared by every session (one transaction making
    /// 1,607 tables ran out: "out of shared memory"): a mapping of more passed `validate`, and
    /// then every run failed with no place in the file.
    public static let maxMappedTables = 1_000

    /// The columns of every record type's table, before its mapped fields.
    static let recordTableColumns: [ColumnSpec] = [
        ColumnSpec(name: "zone_owner", type: "text", rest: "NOT NULL"),
        ColumnSpec(name: "zone_name", type: "text", rest: "NOT NULL"),
        ColumnSpec(name: "record_name", type: "text", rest: "NOT NULL"),
        ColumnSpec(name: "record_type", type: "text", rest: "NOT NULL"),
        ColumnSpec(name: "change_tag", type: "text"),
        ColumnSpec(name: "created_at", type: "timestamp with time zone"),
        ColumnSpec(name: "modified_at", type: "timestamp with time zone"),
        ColumnSpec(name: "created_by", type: "text"),
        ColumnSpec(name: "modified_by", type: "text"),
        ColumnSpec(name: "deleted_at", type: "timestamp with time zone"),
        ColumnSpec(name: "synced_at", type: "timestamp with time zone", rest: "NOT NULL DEFAULT now()"),
        ColumnSpec(name: "run_id", type: "bigint", rest: "NOT NULL"),
        ColumnSpec(name: "generation", type: "integer", rest: "NOT NULL"),
    ]

    /// A record type's table: the columns every one has, a column per mapped field (which `ddl`
    /// adds to a table made before the field was mapped), and `fields`.
    static func recordTable(_ mapping: PostgresRecordTypeMapping) -> TableSpec {
        TableSpec(
            columns: recordTableColumns
                + mapping.fields.map { ColumnSpec(name: $0.column, type: $0.type.formatTypeName, addedLater: true, quoted: true) }
                + [ColumnSpec(name: "fields", type: "jsonb")],
            constraints: ["PRIMARY KEY (zone_owner, zone_name, record_name)"])
    }

    /// The tables zonefeed writes, by name, with the shape each needs.
    var neededShapes: [(name: String, spec: TableSpec)] {
        [
            ("zonefeed_checkpoints", Self.checkpointsTable), ("zonefeed_runs", Self.runsTable), ("zonefeed_tombstones", Self.tombstonesTable),
            ("zonefeed_rejects", Self.rejectsTable), ("zonefeed_schema_changes", Self.schemaChangesTable),
            ("zonefeed_tables", Self.tableOwnersTable),
        ] + tables.map { ($0.mapping.table, Self.recordTable($0.mapping)) }
    }

    /// What the tables already in the schema lack of the shape zonefeed needs: for each, a
    /// sentence naming the table, its columns that are missing or of another type, and what they
    /// must be. Empty when every table there is one zonefeed can write (extra columns are fine).
    func shapeProblems(given catalog: Catalog) -> [String] {
        var problems: [String] = []
        // A mapped field's column of another type: the file's mapping (or the schema file's
        // type) changed since the column was made, not a table zonefeed did not make.
        let fieldOfColumn = Dictionary(
            tables.flatMap { table in table.mapping.fields.map { ("\(table.mapping.table)\u{0}\($0.column)", $0.field) } },
            uniquingKeysWith: { first, _ in first })
        for (name, spec) in neededShapes {
            guard let existing = catalog.types[name] else { continue }
            var wrong: [String] = []
            for column in spec.columns {
                if let type = existing[column.name] {
                    guard type != column.type else { continue }
                    if let field = fieldOfColumn["\(name)\u{0}\(column.name)"] {
                        // As the pipeline file writes types (timestamptz[], not PostgreSQL's
                        // timestamp with time zone[]), quoted as a flow mapping needs a list's.
                        let wanted = ColumnType.allCases.first { $0.formatTypeName == column.type }?.rawValue ?? column.type
                        let keep =
                            ColumnType.allCases.first { $0.formatTypeName == type }
                            .map { "Map \(field) as \($0.rawValue) again, or" } ?? "zonefeed writes no \(type) column (was it changed by hand?):"
                        problems.append(
                            "column \(column.name) of table \(schema).\(name) is \(type), and field \(field) is now mapped as \(wanted): "
                                + "zonefeed never changes a column's type (values could be lost). \(keep) map it to a column of its own "
                                + "({ column: <a new name>, type: \"\(wanted)\" }), then reset the pipeline to fill it")
                    } else {
                        wrong.append("\(column.name) is \(type), not \(column.type)")
                    }
                } else if !column.addedLater {
                    wrong.append("no column \(column.name) (\(column.type))")
                }
            }
            // Without it, `ON CONFLICT` fails every batch; and rows copied straight into the
            // table (a backfill's first generation) meet no key, so a record on two pages had
            // two rows, which no key could be added over afterwards.
            if let key = spec.key, !(catalog.uniqueKeys[name] ?? []).contains(Set(key)) {
                let columns = key.joined(separator: ", ")
                wrong.append(
                    "no primary key or unique index on (\(columns)), which its rows are keyed on "
                        + "(with any rows that repeat a key removed: ALTER TABLE \(PostgresSettings.sqlName(schema)).\(PostgresSettings.sqlName(name)) "
                        + "ADD PRIMARY KEY (\(columns)))")
            }
            guard !wrong.isEmpty else { continue }
            let has = existing.keys.sorted().prefix(12).map { "\($0) \(existing[$0]!)" }.joined(separator: ", ")
            problems.append(
                "table \(schema).\(name) is not of the shape zonefeed writes: \(wrong.prefix(8).joined(separator: "; "))"
                    + (wrong.count > 8 ? " (and \(wrong.count - 8) more)" : "") + "; it has \(has)\(existing.count > 12 ? ", …" : "")")
        }
        return problems
    }
}

extension PostgresSchema.ColumnSpec {
    /// The type as written in DDL: `bigserial` for the ids PostgreSQL numbers itself.
    var ddlType: String {
        if type == "bigint", rest == "PRIMARY KEY" { return "bigserial" }
        switch type {
        case "timestamp with time zone": return "timestamptz"
        case "timestamp with time zone[]": return "timestamptz[]"
        default: return type
        }
    }
}

extension ColumnType {
    /// The type as PostgreSQL's `format_type` names it, as the catalog says.
    var formatTypeName: String {
        switch self {
        case .timestamptz: return "timestamp with time zone"
        case .timestamptzArray: return "timestamp with time zone[]"
        default: return rawValue
        }
    }
}

/// Tables in the destination's schema that zonefeed cannot write, found before anything is.
public struct DestinationShapeError: Error, Sendable, CustomStringConvertible {
    public var problems: [String]
    public var description: String {
        // A field mapped anew says what to do itself; any other problem is a table of another's.
        let tables = problems.filter { $0.hasPrefix("table ") }
        let fields = problems.filter { !$0.hasPrefix("table ") }
        var sentences = fields
        if !tables.isEmpty {
            sentences.append(
                tables.joined(separator: "; ")
                    + ". zonefeed makes these tables itself: drop or rename the ones above (they were not made by zonefeed, or were changed by "
                    + "hand), or give the pipeline another destination.schema")
        }
        return sentences.joined(separator: ". ")
    }
}
