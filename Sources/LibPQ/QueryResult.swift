/// The rows of a query, read eagerly as text (zonefeed's reads are small: checkpoints, runs, counts).
public struct QueryResult: Sendable {
    public let columns: [String]
    public let rows: [Row]
    /// Rows inserted, updated or deleted, from the command tag.
    public let affectedRows: Int

    init(columns: [String], rows: [[String?]], affectedRows: Int) {
        self.columns = columns
        self.rows = rows.map { Row(columns: columns, values: $0) }
        self.affectedRows = affectedRows
    }

    public var count: Int { rows.count }

    /// The first column of the first row, as text.
    public var scalar: String? { rows.first?.first ?? nil }

    /// The first column of the first row, decoded; throws when there is no row.
    public func scalar<T: PostgresDecodable>(as type: T.Type = T.self) throws -> T {
        guard let row = rows.first else {
            throw PostgresError(kind: .decoding, message: "the query returned no row where one was expected")
        }
        return try row.decode(0, as: type)
    }

    /// One row: its values as PostgreSQL's text output (`row[2]`), or decoded into Swift types
    /// (`try row.decode(2, as: Int64.self)`), with an error that names the column rather than a crash.
    public struct Row: Sendable, RandomAccessCollection {
        public let columns: [String]
        let values: [String?]

        public var startIndex: Int { values.startIndex }
        public var endIndex: Int { values.endIndex }
        public subscript(position: Int) -> String? { values[position] }

        public func decode<T: PostgresDecodable>(_ column: Int, as type: T.Type = T.self) throws -> T {
            do {
                return try T(postgresText: values[column])
            } catch {
                let name = column < columns.count ? columns[column] : "#\(column)"
                throw PostgresError(kind: .decoding, message: "column \(name) \(error.sentence)")
            }
        }
    }
}
