import LibPQ
import Logging
import ZoneFeed

/// `schemaEvolution: evolve`: the tables grow as records bring record types and fields the
/// mapping lacks, in the transaction of the batch that brought them, and every change is
/// recorded in `zonefeed_schema_changes`, which is also where its names are read back from.
extension PostgresDestination {
    /// The pipeline's recorded changes, oldest first. (`cloudkit_type` through jsonb: `status`
    /// reads tables that `prepare` has not brought up to date.)
    func recordedChanges(on c: Connection) throws -> [SchemaChange] {
        try c.query(
            """
            SELECT id, change, record_type, table_name, field, column_name, column_type, to_jsonb(c) ->> 'cloudkit_type', why
            FROM \(mappedSchema.schemaChanges) AS c WHERE pipeline = $1 ORDER BY id
            """, [pipelineName]
        ).rows.compactMap { row in
            guard let kind = SchemaChange.Kind(rawValue: try row.decode(1)) else { return nil }
            var change = SchemaChange(
                kind: kind, recordType: try row.decode(2), table: try row.decode(3), field: try row.decode(4), column: try row.decode(5),
                columnType: try row.decode(6, as: String?.self).flatMap(ColumnType.init(name:)), cloudKitType: try row.decode(7),
                why: try row.decode(8))
            change.id = try row.decode(0)
            return change
        }
    }

    /// How long a change of shape waits for a table's readers and writers, each try.
    static let evolutionLockTimeout = "5s"

    /// The tables as they are: the pipeline's mapping with every recorded change.
    func loadSchema(on c: Connection) throws -> PostgresSchema {
        mappedSchema.applying(try recordedChanges(on: c))
    }

    /// `schema`, or the tables as they are now when another process has grown them since (one
    /// small query per batch, only when the schema evolves; `prepare` reads the changes made
    /// before the run either way).
    func refreshed(_ schema: PostgresSchema, on c: Connection) throws -> PostgresSchema {
        guard settings.evolves else { return schema }
        let last = try c.query("SELECT coalesce(max(id), 0) FROM \(schema.schemaChanges) WHERE pipeline = $1", [pipelineName])
            .scalar(as: Int64.self)
        guard last != schema.version else { return schema }
        let loaded = try loadSchema(on: c)
        publish(loaded)
        return loaded
    }

    /// Makes the tables and columns `growth` needs, in the open transaction, and records each
    /// change. Processes of the pipeline that meet the same new field take turns here; the one
    /// that comes second finds the column made and its name recorded, and uses both. The lock
    /// is taken before anything else in the transaction, so that it never waits holding a
    /// table another waits for.
    func evolve(by growth: SchemaGrowth, runID: Int64, on c: Connection) throws -> (PostgresSchema, [SchemaChange]) {
        try c.query("SELECT pg_advisory_xact_lock(hashtext($1), hashtext('schema evolution'))", [key])
        // Tables are also made by other pipelines' `prepare` and evolution in this schema, which
        // must not pick the same new name at once. A column added to this pipeline's own table
        // does not make them wait (its ALTER may wait for a long query).
        if !growth.recordTypes.isEmpty { try PostgresSchema.lockDDL(of: schema.schema, on: c) }
        let current = try loadSchema(on: c)
        let catalog = try PostgresSchema.Catalog.read(schema: current.schema, on: c)
        let claimed =
            growth.recordTypes.isEmpty
            ? []
            : Set(
                try c.query("SELECT table_name FROM \(current.tableOwners) WHERE pipeline <> $1", [pipelineName]).rows.map {
                    try $0.decode(0, as: String.self)
                })
        var changes = growth.changes(to: current, catalog: catalog, claimed: claimed)
        guard !changes.isEmpty else { return (current, []) }
        for i in changes.indices {
            let change = changes[i]
            changes[i].id = try c.query(
                """
                INSERT INTO \(current.schemaChanges)
                    (pipeline, run_id, change, record_type, table_name, field, column_name, column_type, cloudkit_type, why)
                VALUES ($1, $2::bigint, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id
                """,
                [
                    pipelineName, String(runID), change.kind.rawValue, change.recordType, change.table, change.field, change.column,
                    change.columnType?.rawValue, change.cloudKitType, change.why,
                ]
            ).scalar(as: Int64.self)
        }
        let evolved = current.applying(changes)
        let touched = Set(changes.map(\.table))
        // A table made now is named apart from every relation there is, so a claim on its name
        // is one left by a table dropped since.
        let made = Set(changes.filter { $0.kind == .tableCreated }.map(\.table))
        try evolved.claimTables(made.sorted(), made: made, on: c)
        // ALTER TABLE waits for every reader of the table, and every reader after it waits for
        // it: a long query would stall the table for all. It waits this long at most; the
        // batch is then tried again (see `apply`).
        try c.execute("SET LOCAL lock_timeout = '\(Self.evolutionLockTimeout)'")
        for table in evolved.tables where touched.contains(table.mapping.table) {
            for statement in evolved.tableDDL(table, given: catalog) {
                do {
                    try c.execute(statement)
                } catch let error as PostgresError {
                    throw error.withContext("growing table \(table.mapping.table) for record type \(table.mapping.recordType)")
                }
            }
        }
        // The batch's own statements wait as they always do.
        try c.execute("SET LOCAL lock_timeout TO DEFAULT")
        return (evolved, changes)
    }

    /// One line per table made (with its columns) and per column added to a table there was
    /// already, once they are committed.
    func logShapeChanges(_ changes: [SchemaChange], runID: Int64) {
        let made = Set(changes.filter { $0.kind == .tableCreated }.map(\.table))
        for change in changes {
            let metadata: Logger.Metadata = ["run": "\(runID)", "recordType": "\(change.recordType)", "table": "\(change.table)"]
            switch change.kind {
            case .tableCreated:
                let columns = changes.filter { $0.kind == .columnAdded && $0.table == change.table }
                    .map { "\($0.column ?? "") \($0.columnType?.rawValue ?? "")" }
                logger.notice(
                    "made a table for a new record type", metadata: metadata.merging(["columns": "\(columns.joined(separator: ", "))"]) { $1 })
            case .columnAdded where !made.contains(change.table):
                logger.notice(
                    "added a column for a new field",
                    metadata: metadata.merging([
                        "field": "\(change.field ?? "")", "column": "\(change.column ?? "")", "type": "\(change.columnType?.rawValue ?? "")",
                    ]) { $1 })
            case .columnAdded:
                break
            }
        }
    }
}
