import LibPQ
import ZoneFeed

/// The SQL names and DDL of a pipeline's destination, derived from the pipeline alone, so that
/// `zonefeed validate` can print what a run would create without connecting. Every identifier from
/// the pipeline file is quoted.
public struct PostgresSchema: Sendable {
    public let pipelineName: String
    public let settings: PostgresSettings
    public let schema: String
    public let tables: [Table]
    /// The id of the last `SchemaChange` replayed into it; 0 for the pipeline's own mapping.
    public internal(set) var version: Int64 = 0

    public struct Table: Sendable {
        public let mapping: PostgresRecordTypeMapping
        /// `"schema"."table"`.
        public let qualifiedName: String
        public let liveViewName: String
        /// The session's staging table for this record type.
        public let stagingName: String
        /// The statements of every batch, made once.
        let copyIntoStaging: String
        let copyIntoTable: String
        let merge: String
        let mergeKeepingLast: String
        /// How many staged versions carry the tag of the version before them (`$1` owner, `$2`
        /// zone, `$3` generation), before a merge keeping the last.
        let countUnchanged: String

        init(mapping: PostgresRecordTypeMapping, qualifiedName: String, liveViewName: String, stagingName: String) {
            self.mapping = mapping
            self.qualifiedName = qualifiedName
            self.liveViewName = liveViewName
            self.stagingName = stagingName
            let data = PostgresSchema.dataColumns(mapping)
            copyIntoStaging = "COPY \(stagingName) (\((["seq"] + data).joined(separator: ", "))) FROM STDIN (FORMAT binary)"
            copyIntoTable = "COPY \(qualifiedName) (\(PostgresSchema.directColumns(mapping).joined(separator: ", "))) FROM STDIN (FORMAT binary)"
            merge = PostgresSchema.mergeSQL(data: data, into: qualifiedName, from: stagingName, deduplicate: false)
            mergeKeepingLast = PostgresSchema.mergeSQL(data: data, into: qualifiedName, from: stagingName, deduplicate: true)
            countUnchanged = PostgresSchema.countUnchangedSQL(in: qualifiedName, staging: stagingName)
        }
    }

    /// The schema of a pipeline whose destination is PostgreSQL; throws when it is another.
    public init(pipeline: Pipeline) throws {
        self.init(pipelineName: pipeline.name, settings: try pipeline.postgresSettings())
    }

    public init(pipelineName: String, settings: PostgresSettings) {
        self.pipelineName = pipelineName
        self.settings = settings
        schema = settings.schema
        let q = quoteIdentifier(settings.schema)
        tables = settings.recordTypes.enumerated().map { i, mapping in
            Table(
                mapping: mapping,
                qualifiedName: "\(q).\(quoteIdentifier(mapping.table))",
                liveViewName: "\(q).\(quoteIdentifier(mapping.table + "_live"))",
                stagingName: "zf_stage_\(i)")
        }
        var index: [String: Int] = [:]
        for (i, table) in tables.enumerated() where index[table.mapping.recordType] == nil { index[table.mapping.recordType] = i }
        tableIndex = index
    }

    private let tableIndex: [String: Int]

    public func table(forRecordType type: String) -> Int? {
        tableIndex[type]
    }

    func meta(_ name: String) -> String { "\(quoteIdentifier(schema)).\(quoteIdentifier(name))" }
    var checkpoints: String { meta("zonefeed_checkpoints") }
    var runs: String { meta("zonefeed_runs") }
    var tombstones: String { meta("zonefeed_tombstones") }
    var rejects: String { meta("zonefeed_rejects") }
    var schemaChanges: String { meta("zonefeed_schema_changes") }
    var tableOwners: String { meta("zonefeed_tables") }

    /// Takes, until the transaction ends, the lock under which zonefeed makes things in
    /// `schema`: `CREATE … IF NOT EXISTS` is not safe against a concurrent creation of the same
    /// object, and two evolving pipelines must not pick the same new table name at once. Names
    /// clash only within a schema, so pipelines in other schemas do not wait for each other's.
    static func lockDDL(of schema: String, on c: Connection) throws {
        try c.query("SELECT pg_advisory_xact_lock(hashtext('zonefeed ddl'), hashtext($1))", [schema])
    }

    /// What the schema already holds, as far as `ddl(given:)` needs to know.
    struct Catalog {
        /// Per relation name (table, view, index, sequence, …): its columns, and those with a
        /// default.
        var columns: [String: Set<String>] = [:]
        var defaults: [String: Set<String>] = [:]
        /// Per table (and view), each column's type as `format_type` names it.
        var types: [String: [String: String]] = [:]
        /// Per table, the key columns of each of its unique indexes (its primary key's among
        /// them) that `ON CONFLICT` can take: valid, checked at once (not deferrable), on plain
        /// columns for every row (no expression, no `WHERE`); `INCLUDE` columns are not keys.
        var uniqueKeys: [String: [Set<String>]] = [:]
        /// Every name in the schema a new table (or its view) cannot take: each relation's, those
        /// without columns too, and each type's (an extension's such as PostGIS's `geometry`, an
        /// enum, a domain), since a table is a type of its name as well.
        var takenNames: Set<String> = []

        static func read(schema: String, on c: Connection) throws -> Catalog {
            var catalog = Catalog()
            for row in try c.query(
                """
                SELECT cl.relname FROM pg_catalog.pg_class AS cl JOIN pg_catalog.pg_namespace AS n ON n.oid = cl.relnamespace WHERE n.nspname = $1
                UNION SELECT t.typname FROM pg_catalog.pg_type AS t JOIN pg_catalog.pg_namespace AS n ON n.oid = t.typnamespace WHERE n.nspname = $1
                """, [schema]
            ).rows {
                catalog.takenNames.insert(try row.decode(0))
            }
            let rows = try c.query(
                """
                SELECT cl.relname, a.attname, a.atthasdef, format_type(a.atttypid, a.atttypmod)
                FROM pg_catalog.pg_class AS cl
                JOIN pg_catalog.pg_namespace AS n ON n.oid = cl.relnamespace
                JOIN pg_catalog.pg_attribute AS a ON a.attrelid = cl.oid AND a.attnum > 0 AND NOT a.attisdropped
                WHERE n.nspname = $1
                """, [schema]
            ).rows
            for row in rows {
                let relation: String = try row.decode(0)
                let column: String = try row.decode(1)
                catalog.columns[relation, default: []].insert(column)
                if try row.decode(2, as: Bool.self) { catalog.defaults[relation, default: []].insert(column) }
                catalog.types[relation, default: [:]][column] = try row.decode(3)
            }
            let keys = try c.query(
                """
                SELECT t.relname, i.indexrelid::bigint, a.attname
                FROM pg_catalog.pg_index AS i
                JOIN pg_catalog.pg_class AS t ON t.oid = i.indrelid
                JOIN pg_catalog.pg_namespace AS n ON n.oid = t.relnamespace
                JOIN pg_catalog.pg_attribute AS a ON a.attrelid = t.oid AND a.attnum = ANY ((i.indkey::int2[])[0:i.indnkeyatts - 1])
                WHERE n.nspname = $1 AND i.indisunique AND i.indisvalid AND i.indimmediate AND i.indpred IS NULL AND i.indexprs IS NULL
                """, [schema]
            ).rows
            var indexes: [Int64: (table: String, columns: Set<String>)] = [:]
            for row in keys {
                let (table, index, column): (String, Int64, String) = (try row.decode(0), try row.decode(1), try row.decode(2))
                indexes[index, default: (table, [])].columns.insert(column)
            }
            for (table, columns) in indexes.values { catalog.uniqueKeys[table, default: []].append(columns) }
            return catalog
        }
    }

    /// What `prepare` runs, in order; every statement is idempotent.
    public var ddl: [String] { ddl(given: nil) }

    /// `ddl` without the statements that would change nothing in `catalog`, empty when it holds
    /// everything: an `ALTER TABLE` or `CREATE OR REPLACE VIEW` locks its table against every
    /// reader, and a `CREATE INDEX … IF NOT EXISTS` against every writer, even when it finds
    /// nothing to do, and would wait behind a long query on it (or make others wait behind it);
    /// and `prepare` takes the schema's DDL lock only when there is something to make.
    func ddl(given catalog: Catalog?) -> [String] {
        // Whether the catalog lacks the relation (always, without a catalog).
        func lacks(_ relation: String) -> Bool { catalog?.columns[relation] == nil }
        var statements: [String] = []
        if catalog?.columns.isEmpty ?? true { statements.append("CREATE SCHEMA IF NOT EXISTS \(quoteIdentifier(schema))") }
        if lacks("zonefeed_checkpoints") { statements.append(Self.checkpointsTable.create(checkpoints)) }
        // Added after the table was first made: tables made before get it here, each row its own.
        if catalog?.columns["zonefeed_checkpoints"].map({ !$0.contains("incarnation") }) ?? (catalog == nil) {
            statements.append("ALTER TABLE \(checkpoints) ADD COLUMN IF NOT EXISTS incarnation bigint NOT NULL DEFAULT \(Self.newIncarnation)")
        }
        if lacks("zonefeed_runs") { statements.append(Self.runsTable.create(runs)) }
        // Added after the table was first made: tables made before get it here.
        if catalog?.columns["zonefeed_runs"].map({ !$0.contains("throttled_seconds") }) ?? (catalog == nil) {
            statements.append("ALTER TABLE \(runs) ADD COLUMN IF NOT EXISTS throttled_seconds double precision NOT NULL DEFAULT 0")
        }
        // A run's start looks for the pipeline's runs still `running`; the table gains a row a
        // run (a watch, one a cycle) and is never emptied, and was read whole each time.
        if lacks("zonefeed_runs_running") {
            statements.append("CREATE INDEX IF NOT EXISTS zonefeed_runs_running ON \(runs) (pipeline) WHERE status = 'running'")
        }
        if lacks("zonefeed_tombstones") { statements.append(Self.tombstonesTable.create(tombstones)) }
        if lacks("zonefeed_tombstones_record") {
            statements.append("CREATE INDEX IF NOT EXISTS zonefeed_tombstones_record ON \(tombstones) (zone_owner, zone_name, record_name)")
        }
        if lacks("zonefeed_rejects") { statements.append(Self.rejectsTable.create(rejects)) }
        if lacks("zonefeed_schema_changes") { statements.append(Self.schemaChangesTable.create(schemaChanges)) }
        // Added after the table was first made (on main for a day): tables made before get it here.
        if catalog?.columns["zonefeed_schema_changes"].map({ !$0.contains("cloudkit_type") }) ?? (catalog == nil) {
            statements.append("ALTER TABLE \(schemaChanges) ADD COLUMN IF NOT EXISTS cloudkit_type text")
        }
        if lacks("zonefeed_schema_changes_pipeline") {
            statements.append("CREATE INDEX IF NOT EXISTS zonefeed_schema_changes_pipeline ON \(schemaChanges) (pipeline, id)")
        }
        if lacks("zonefeed_tables") { statements.append(Self.tableOwnersTable.create(tableOwners)) }
        for table in tables {
            statements += tableDDL(table, given: catalog)
        }
        return statements
    }

    /// A record type's table, its view and its indexes: what `catalog` lacks of them (everything
    /// without a catalog).
    func tableDDL(_ table: Table, given catalog: Catalog?) -> [String] {
        let name = table.mapping.table
        var statements: [String] = []
        if catalog?.columns[name] == nil { statements.append(Self.recordTable(table.mapping).create(table.qualifiedName)) }
        // What the table already has: unknown without a catalog (every statement is then
        // listed); everything when the statement above has just made it.
        var known: (columns: Set<String>, syncedAtDefault: Bool)?
        if let catalog {
            known =
                catalog.columns[name].map { ($0, catalog.defaults[name]?.contains("synced_at") == true) }
                ?? (Set(table.mapping.fields.map(\.column)), true)
        }
        // Rows copied straight into the table take synced_at from its default (tables made
        // before it had one get it here).
        if known?.syncedAtDefault != true {
            statements.append("ALTER TABLE \(table.qualifiedName) ALTER COLUMN synced_at SET DEFAULT now()")
        }
        // A mapping that gained a field since the table was made gets its column added, and
        // the view (whose * was expanded when it was made) is made again to show it.
        var added = false
        for field in table.mapping.fields where known?.columns.contains(field.column) != true {
            statements.append("ALTER TABLE \(table.qualifiedName) ADD COLUMN IF NOT EXISTS \(quoteIdentifier(field.column)) \(field.type.rawValue)")
            added = true
        }
        if added || catalog?.columns[name + "_live"] == nil {
            statements.append("CREATE OR REPLACE VIEW \(table.liveViewName) AS SELECT * FROM \(table.qualifiedName) WHERE deleted_at IS NULL")
        }
        // Indexes asked for (a schema file's QUERYABLE and SORTABLE fields), made when missing.
        for field in table.mapping.fields where field.indexed && field.type.isIndexable {
            let index = Self.indexName(table: name, column: field.column)
            if catalog?.columns[index] == nil {
                statements.append(
                    "CREATE INDEX IF NOT EXISTS \(quoteIdentifier(index)) ON \(table.qualifiedName) USING \(field.type.indexMethod) (\(quoteIdentifier(field.column)))"
                )
            }
        }
        return statements
    }

    /// `<table>_<column>_<hash of both>`, within 63 bytes: an index's name is unique in its
    /// schema, and `note`.`body_text` and `note_body`.`text` must not share one.
    static func indexName(table: String, column: String) -> String {
        IdentifierNames(maxBytes: 63).suffixed("\(table)_\(column)", hashing: "\(table)\u{0}\(column)")
    }

    /// The temporary table a session stages a record type's rows in, emptied at every commit.
    /// Made when the session first stages rows of the type (`PostgresDestination.stage`): every
    /// commit empties every such table, about 0.35 ms each (docs/performance.md), so a session
    /// that made one a mapped type paid for all of them at each batch.
    func stagingTableDDL(_ table: Table) -> String {
        let mapped = table.mapping.fields.map { "\(quoteIdentifier($0.column)) \($0.type.rawValue)" }
        let columns =
            [
                "seq integer", "record_name text", "record_type text", "change_tag text", "created_at timestamptz",
                "modified_at timestamptz", "created_by text", "modified_by text",
            ] + mapped + ["fields jsonb"]
        return "CREATE TEMP TABLE IF NOT EXISTS \(table.stagingName) (\(columns.joined(separator: ", "))) ON COMMIT DELETE ROWS"
    }

    /// The session's temporary tables of deletions and listed names, emptied at every commit.
    static let sessionTablesDDL = [
        "CREATE TEMP TABLE IF NOT EXISTS zf_deletes (seq integer, record_name text, record_type text, later_type text, final boolean) ON COMMIT DELETE ROWS",
        "CREATE TEMP TABLE IF NOT EXISTS zf_listed (record_type text, record_name text, change_tag text) ON COMMIT DELETE ROWS",
    ]

    /// The columns after the first of both row shapes, in the order `RowEncoder` writes them.
    static func dataColumns(_ mapping: PostgresRecordTypeMapping) -> [String] {
        ["record_name", "record_type", "change_tag", "created_at", "modified_at", "created_by", "modified_by"]
            + mapping.fields.map { quoteIdentifier($0.column) } + ["fields"]
    }

    /// The columns of a row copied straight into a record type's table; `synced_at` takes its
    /// default, the transaction's `now()`, and `deleted_at` is NULL, as in a merge.
    public static func directColumns(_ mapping: PostgresRecordTypeMapping) -> [String] {
        ["zone_owner", "zone_name", "run_id", "generation"] + dataColumns(mapping)
    }

    /// The staged versions whose change tag is the one before them: the live row's of that
    /// generation for a record's first version in the batch, its previous version's for the
    /// others.
    static func countUnchangedSQL(in table: String, staging: String) -> String {
        """
        SELECT count(*) FROM (
            SELECT s.change_tag AS tag,
                CASE WHEN row_number() OVER w = 1 THEN t.change_tag ELSE lag(s.change_tag) OVER w END AS before
            FROM \(staging) AS s
            LEFT JOIN \(table) AS t ON t.zone_owner = $1 AND t.zone_name = $2 AND t.record_name = s.record_name
                AND t.deleted_at IS NULL AND t.generation = $3::integer
            WINDOW w AS (PARTITION BY s.record_name ORDER BY s.seq)
        ) AS versions WHERE tag = before
        """
    }

    /// One merge per table per batch: the staged rows replace the stored ones (all columns),
    /// bring deleted rows back to life and stamp the run and generation; an unchanged live row
    /// of the same generation is left as it is. When a batch holds the
    /// same record more than once, the last one wins (`DISTINCT ON … seq DESC`).
    static func mergeSQL(data: [String], into table: String, from staging: String, deduplicate: Bool) -> String {
        let insertColumns = ["zone_owner", "zone_name"] + data + ["deleted_at", "synced_at", "run_id", "generation"]
        let select = "$1::text, $2::text, " + data.joined(separator: ", ") + ", NULL, now(), $3::bigint, $4::integer"
        let from =
            deduplicate
            ? "(SELECT DISTINCT ON (record_name) * FROM \(staging) ORDER BY record_name, seq DESC) AS s"
            : "\(staging) AS s"
        let updates = (data.dropFirst() + ["deleted_at", "synced_at", "run_id", "generation"]).map { "\($0) = EXCLUDED.\($0)" }
        // A record that comes again with the change tag its live row has is not written again
        // (a query zone reads its lag twice), unless the row must join a new generation (a
        // resync or a sweep). A record without a tag is always written.
        return """
            INSERT INTO \(table) AS t (\(insertColumns.joined(separator: ", ")))
            SELECT \(select) FROM \(from)
            ON CONFLICT (zone_owner, zone_name, record_name) DO UPDATE SET \(updates.joined(separator: ", "))
            WHERE t.change_tag IS DISTINCT FROM EXCLUDED.change_tag OR EXCLUDED.change_tag IS NULL OR t.deleted_at IS NOT NULL
                OR t.generation <> EXCLUDED.generation
            """
    }
}
