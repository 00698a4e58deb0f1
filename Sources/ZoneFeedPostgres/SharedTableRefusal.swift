import LibPQ

/// A table this pipeline maps is written by another pipeline (`zonefeed_tables`): refused before
/// a row is written, as each pipeline's resyncs, zone deletions and resets would tombstone the
/// other's rows.
public struct SharedTableRefusal: Error, Sendable, CustomStringConvertible {
    public var schema: String
    public var pipeline: String
    /// Each table taken, and the pipeline that writes it.
    public var others: [(table: String, pipeline: String)]

    public var description: String {
        let taken = others.map { "table \(schema).\($0.table) is written by pipeline \($0.pipeline)" }.joined(separator: "; ")
        func literal(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "''", options: .literal) + "'" }
        let owners = Array(Set(others.map(\.pipeline))).sorted()
        // Those tables only: the other pipeline may write tables of its own still.
        let release = owners.map { owner in
            let tables = others.filter { $0.pipeline == owner }.map { literal($0.table) }.joined(separator: ", ")
            return "DELETE FROM \(quoteIdentifier(schema)).zonefeed_tables WHERE pipeline = \(literal(owner)) AND table_name IN (\(tables))"
        }
        return "\(taken), and pipeline \(pipeline) maps a record type to it: a table's rows are keyed by zone and record name, not by "
            + "pipeline, so each pipeline's resyncs and resets would tombstone the other's rows. Give pipeline \(pipeline) tables of "
            + "its own (a record type's table:) or another destination.schema; or, if the other pipeline is gone (renamed), release "
            + "its tables: \(release.joined(separator: "; "))"
    }
}
