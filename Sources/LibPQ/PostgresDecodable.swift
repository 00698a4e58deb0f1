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
