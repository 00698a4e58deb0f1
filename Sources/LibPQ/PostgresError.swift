import CLibPQ

/// A failure reported by libpq or the server. It carries the SQLSTATE and the server's own
/// sentences; it never carries the connection string, so no password can leak through it.
///
/// Its `description` holds no row data either: it reaches the logs, `zonefeed_runs.error`,
/// `zonefeed_checkpoints.last_error` and `zonefeed status`. The server's DETAIL line
/// (`Key (id)=(…) already exists`, `Failing row contains (…)`) is never shown, and its primary
/// message only when its SQLSTATE's messages name objects rather than quote values
/// (`messageWithoutValues`).
public struct PostgresError: Error, Sendable, CustomStringConvertible {
    /// What failed. A struct rather than an enum, so that a new kind breaks no caller's switch.
    public struct Kind: Sendable, Hashable, CustomStringConvertible {
        public let description: String
        private init(_ description: String) { self.description = description }

        public static let connection = Kind("connection")
        public static let query = Kind("query")
        public static let copy = Kind("copy")
        /// A value that did not decode into the Swift type asked for.
        public static let decoding = Kind("decoding")
    }

    public var kind: Kind
    /// The five-character SQLSTATE (`23505`, `40P01`…), nil for client-side failures.
    public var sqlState: String?
    public var message: String
    public var detail: String?
    public var hint: String?
    /// What zonefeed was doing, e.g. "applying a batch to table notes".
    public var context: String?
    /// The table the error concerns: the server's, or the one zonefeed was writing.
    public var table: String?

    public init(
        kind: Kind, sqlState: String? = nil, message: String, detail: String? = nil, hint: String? = nil, context: String? = nil,
        table: String? = nil
    ) {
        self.kind = kind
        self.sqlState = sqlState
        self.message = message
        self.detail = detail
        self.hint = hint
        self.context = context
        self.table = table
    }

    public var description: String {
        var s = ""
        if let context { s += "\(context): " }
        if kind == .connection {
            s += "could not connect to PostgreSQL: "
        } else if kind == .decoding {
            s += "unexpected value from PostgreSQL: "
        } else {
            s += "PostgreSQL error"
        }
        if kind != .connection && kind != .decoding {
            if let sqlState { s += " \(sqlState)" }
            if let table { s += " in table \(table)" }
            s += ": "
        }
        s += messageWithoutValues
        if let hint, messageMayQuoteValues == false { s += " (hint: \(hint))" }
        return s
    }

    public func withContext(_ context: String) -> PostgresError {
        var copy = self
        copy.context = context
        return copy
    }

    /// The same error, said to concern `table` unless the server named one.
    public func inTable(_ table: String) -> PostgresError {
        var copy = self
        copy.table = copy.table ?? table
        return copy
    }

    /// The server's primary message when it cannot quote a row's value; otherwise a sentence
    /// made from the SQLSTATE. A data exception (class 22) quotes the value it could not take
    /// (`invalid input syntax for type bigint: "…"`), a function or trigger (class P0) says
    /// whatever it was told to, an internal error anything; the full message stays in `message`
    /// for code, and is never printed.
    public var messageWithoutValues: String {
        guard messageMayQuoteValues, let sqlState else { return message }
        return "\(Self.condition(sqlState)) (the server's message is not shown, as it may quote a row's value)"
    }

    /// Whether the server's messages for this SQLSTATE may quote a value: true unless its class is
    /// one whose messages name tables, columns, constraints and types only. Client-side failures
    /// (no SQLSTATE) are zonefeed's and libpq's own sentences.
    var messageMayQuoteValues: Bool {
        guard let sqlState else { return false }
        return !Self.classesNamingObjectsOnly.contains(String(sqlState.prefix(2)))
    }

    /// SQLSTATE classes (PostgreSQL's Appendix A) whose messages name objects, never values:
    /// connection, feature, transaction, authorization, catalog and schema names, integrity
    /// constraints (their values are in the DETAIL line), syntax and access, resources, limits,
    /// object state, operator intervention, system and configuration errors.
    static let classesNamingObjectsOnly: Set<String> = [
        "08", "0A", "0B", "0L", "0P", "21", "23", "24", "25", "26", "28", "2B", "2D", "34", "3B", "3D", "3F", "40", "42", "44",
        "53", "54", "55", "57", "58", "F0", "72",
    ]

    /// What an SQLSTATE whose message is not shown means, in a few words.
    static func condition(_ sqlState: String) -> String {
        switch sqlState {
        case "22P02": return "a value is not valid input for its column's type"
        case "22P03": return "a value is not valid binary input for its column's type"
        case "22001": return "a value is too long for its column"
        case "22003": return "a number is out of range for its column"
        case "22007", "22008": return "a date or time is malformed or out of range"
        case "22021": return "a text value holds bytes that are not valid in the database's encoding"
        case "22P05": return "a text value holds a character that the database's encoding cannot hold"
        case "22002", "22004": return "a null value where none is allowed"
        case "22012": return "a division by zero"
        case "2202E": return "an array subscript is out of range"
        case "P0001": return "a function or trigger raised an error"
        default: break
        }
        switch sqlState.prefix(2) {
        case "22": return "a value could not be taken (a data exception)"
        case "P0": return "a PL/pgSQL function failed"
        case "38", "39": return "a function failed"
        case "XX": return "the server failed internally"
        default: return "the server reported an error"
        }
    }

    init(result: OpaquePointer?, connection: OpaquePointer?, kind: Kind) {
        func field(_ code: Int32) -> String? {
            guard let result, let p = PQresultErrorField(result, code) else { return nil }
            return String(cString: p)
        }
        let primary = field(Int32(UInt8(ascii: "M")))  // PG_DIAG_MESSAGE_PRIMARY
        var message = primary ?? ""
        if message.isEmpty, let connection, let p = PQerrorMessage(connection) {
            message = String(cString: p)
        }
        self.init(
            kind: kind,
            sqlState: field(Int32(UInt8(ascii: "C"))),  // PG_DIAG_SQLSTATE
            message: message.trimmingTrailingNewlines(),
            detail: field(Int32(UInt8(ascii: "D"))),  // PG_DIAG_MESSAGE_DETAIL
            hint: field(Int32(UInt8(ascii: "H"))),  // PG_DIAG_MESSAGE_HINT
            table: field(Int32(UInt8(ascii: "t"))))  // PG_DIAG_TABLE_NAME
    }
}

extension String {
    func trimmingTrailingNewlines() -> String {
        var s = Substring(self)
        while s.last == "\n" || s.last == " " { s = s.dropLast() }
        return String(s)
    }
}
