import LibPQ

/// Each record type's table is written by one pipeline, recorded in `zonefeed_tables`. Rows are
/// keyed by zone and record name, not by pipeline: two pipelines mapped to one table took each
/// other's rows as their own, and one's resync sweep, zone deletion or reset tombstoned the
/// other's rows of a zone of the same name. Pipelines may share a schema, never a table.
extension PostgresSchema {
    /// Records this pipeline as the writer of `tables`, in the open transaction, and refuses them
    /// when another pipeline writes one. A claim on a table made in this transaction (`made`) is
    /// taken over: the table it was for is gone (dropped by hand), and the name is free again.
    /// Two pipelines claiming one table at once take turns at its row; the second finds the
    /// first's.
    func claimTables(_ tables: [String], made: Set<String>, on c: Connection) throws {
        guard !tables.isEmpty else { return }
        let names = textArray(Array(Set(tables)).sorted())
        try c.query(
            """
            INSERT INTO \(tableOwners) AS o (table_name, pipeline) SELECT unnest($1::text[]), $2
            ON CONFLICT (table_name) DO UPDATE SET pipeline = excluded.pipeline, claimed_at = now()
            WHERE o.pipeline <> excluded.pipeline AND o.table_name = ANY ($3::text[])
            """, [names, pipelineName, textArray(made.sorted())])
        let others = try c.query(
            "SELECT table_name, pipeline FROM \(tableOwners) WHERE table_name = ANY ($1::text[]) AND pipeline <> $2 ORDER BY table_name",
            [names, pipelineName]
        ).rows.map { (table: try $0.decode(0, as: String.self), pipeline: try $0.decode(1, as: String.self)) }
        guard others.isEmpty else { throw SharedTableRefusal(schema: schema, pipeline: pipelineName, others: others) }
    }
}

/// `values` as a PostgreSQL `text[]` literal, every element quoted (a parameter, never SQL).
private func textArray(_ values: [String]) -> String {
    let elements = values.map { value in
        "\"" + value.replacingOccurrences(of: "\\", with: "\\\\", options: .literal).replacingOccurrences(of: "\"", with: "\\\"", options: .literal) + "\""
    }
    return "{" + elements.joined(separator: ",") + "}"
}
