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

/// Why a value could not be decoded; never quotes the value, which may be row data.
public struct DecodingProblem: Error, Sendable {
    public var sentence: String
    public init(_ sentence: String) { self.sentence = sentence }
}

/// A Swift type a value in PostgreSQL's text output decodes into; `nil` is SQL NULL.
public protocol PostgresDecodable {
    init(postgresText text: String?) throws(DecodingProblem)
}

extension String: PostgresDecodable {
    public init(postgresText text: String?) throws(DecodingProblem) {
        guard let text else { throw DecodingProblem("is NULL where text was expected") }
        self = text
    }
}

extension Int64: PostgresDecodable {
    public init(postgresText text: String?) throws(DecodingProblem) {
        guard let text, let value = Int64(text) else { throw DecodingProblem("is not a bigint") }
        self = value
    }
}

extension Int: PostgresDecodable {
    public init(postgresText text: String?) throws(DecodingProblem) {
        guard let text, let value = Int(text) else { throw DecodingProblem("is not an integer") }
        self = value
    }
}

extension Double: PostgresDecodable {
    public init(postgresText text: String?) throws(DecodingProblem) {
        guard let text, let value = Double(text) else { throw DecodingProblem("is not a double precision") }
        self = value
    }
}

extension Bool: PostgresDecodable {
    /// PostgreSQL writes booleans as `t` and `f`.
    public init(postgresText text: String?) throws(DecodingProblem) {
        switch text {
        case "t": self = true
        case "f": self = false
        default: throw DecodingProblem("is not a boolean")
        }
    }
}

extension Optional: PostgresDecodable where Wrapped: PostgresDecodable {
    public init(postgresText text: String?) throws(DecodingProblem) {
        guard let text else {
            self = .none
            return
        }
        self = .some(try Wrapped(postgresText: text))
    }
}
