/// The rows of a query, read eagerly as text (zonefeed's reads are small: checkpoints, runs, counts).
public struct QueryResult: Sendable {
    public let columns: [String]
    public let rows: [[String?]]
    /// Rows inserted, updated or deleted, from the command tag.
    public let affectedRows: Int

    public var count: Int { rows.count }

    /// The first column of the first row.
    public var scalar: String? { rows.first?.first ?? nil }

}
