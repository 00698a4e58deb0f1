/// The rows of a query, read eagerly as text (zonefeed's reads are small: checkpoints, runs, counts).
public struct QueryResult: Sendable {
    public let columns: [String]
    public let rows: [[String?]]
    /// Rows inserted, updated or deleted, from the command tag.
    public let affectedRows: Int

    public var count: Int { rows.count }

    /// The first column of the first row.
    public var scalar: String? { rows.first?.first ?? nil }

    public func column(_ name: String) -> Int? { columns.firstIndex(of: name) }

    /// Rows as dictionaries keyed by column name; handy in tests and the status command.
    public var namedRows: [[String: String?]] {
        rows.map { row in
            var d: [String: String?] = [:]
            for (i, c) in columns.enumerated() { d[c] = row[i] }
            return d
        }
    }
}
