import CLibPQ

/// A failure reported by libpq or the server. It carries the SQLSTATE and the server's own
/// sentences; it never carries the connection string, so no password can leak through it.
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

    public init(kind: Kind, sqlState: String? = nil, message: String, detail: String? = nil, hint: String? = nil, context: String? = nil) {
        self.kind = kind
        self.sqlState = sqlState
        self.message = message
        self.detail = detail
        self.hint = hint
        self.context = context
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
            s += ": "
        }
        s += message
        if let hint { s += " (hint: \(hint))" }
        return s
    }

    public func withContext(_ context: String) -> PostgresError {
        var copy = self
        copy.context = context
        return copy
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
            hint: field(Int32(UInt8(ascii: "H"))))  // PG_DIAG_MESSAGE_HINT
    }
}

extension String {
    func trimmingTrailingNewlines() -> String {
        var s = Substring(self)
        while s.last == "\n" || s.last == " " { s = s.dropLast() }
        return String(s)
    }
}
