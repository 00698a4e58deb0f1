/// A failed CloudKit Web Services call: the server's error body (`{uuid, serverErrorCode, reason,
/// retryAfter?, redirectURL?}`) or a transport fault, with the operation it concerns.
///
/// `description` is a sentence that says what to do next. It never contains a token, a key or a
/// query string: the request is named by its URL path only, and the client scrubs its secrets out
/// of anything the server echoes back.
public struct CloudKitError: Error, Sendable, CustomStringConvertible {
    public enum Code: Sendable, Hashable, CustomStringConvertible {
        // The server's `serverErrorCode` values (reference §6, plus CloudKit JS's extras).
        case accessDenied
        case atomicError
        case authenticationFailed
        case authenticationRequired
        case badRequest
        case conflict
        case exists
        case internalError
        case notFound
        case quotaExceeded
        case throttled
        case tryAgainLater
        case validatingReferenceError
        case zoneNotFound
        case uniqueFieldError
        case changeTokenExpired
        /// A `serverErrorCode` this client does not know, kept as sent.
        case unknown(String)

        // Faults of the transport, where no server error body was read.
        /// The server could not be reached, or the connection broke (a body cut short too).
        case network
        /// No complete answer within the configured timeout.
        case timeout
        /// The body was larger than `maxResponseBytes`.
        case responseTooLarge
        /// The body was not the JSON the operation returns.
        case malformedResponse

        public init(serverErrorCode: String) {
            switch serverErrorCode {
            case "ACCESS_DENIED": self = .accessDenied
            case "ATOMIC_ERROR": self = .atomicError
            case "AUTHENTICATION_FAILED": self = .authenticationFailed
            case "AUTHENTICATION_REQUIRED": self = .authenticationRequired
            case "BAD_REQUEST": self = .badRequest
            case "CONFLICT": self = .conflict
            case "EXISTS": self = .exists
            case "INTERNAL_ERROR": self = .internalError
            case "NOT_FOUND": self = .notFound
            case "QUOTA_EXCEEDED": self = .quotaExceeded
            case "THROTTLED": self = .throttled
            case "TRY_AGAIN_LATER": self = .tryAgainLater
            case "VALIDATING_REFERENCE_ERROR": self = .validatingReferenceError
            case "ZONE_NOT_FOUND": self = .zoneNotFound
            case "UNIQUE_FIELD_ERROR": self = .uniqueFieldError
            case "CHANGE_TOKEN_EXPIRED": self = .changeTokenExpired
            default: self = .unknown(serverErrorCode)
            }
        }

        /// The code the reference's table gives for an HTTP status, for error responses without a
        /// JSON body (a proxy's HTML page, an empty 503).
        init?(httpStatus: Int) {
            switch httpStatus {
            case 400: self = .badRequest
            case 401: self = .authenticationFailed
            case 403: self = .accessDenied
            case 404: self = .notFound
            case 409: self = .conflict
            case 412: self = .validatingReferenceError
            case 413: self = .quotaExceeded
            case 421: self = .authenticationRequired
            case 429: self = .throttled
            case 503: self = .tryAgainLater
            case 500...599: self = .internalError
            default: return nil
            }
        }

        /// The wire spelling for server codes; nil for transport faults.
        public var serverErrorCode: String? {
            switch self {
            case .accessDenied: return "ACCESS_DENIED"
            case .atomicError: return "ATOMIC_ERROR"
            case .authenticationFailed: return "AUTHENTICATION_FAILED"
            case .authenticationRequired: return "AUTHENTICATION_REQUIRED"
            case .badRequest: return "BAD_REQUEST"
            case .conflict: return "CONFLICT"
            case .exists: return "EXISTS"
            case .internalError: return "INTERNAL_ERROR"
            case .notFound: return "NOT_FOUND"
            case .quotaExceeded: return "QUOTA_EXCEEDED"
            case .throttled: return "THROTTLED"
            case .tryAgainLater: return "TRY_AGAIN_LATER"
            case .validatingReferenceError: return "VALIDATING_REFERENCE_ERROR"
            case .zoneNotFound: return "ZONE_NOT_FOUND"
            case .uniqueFieldError: return "UNIQUE_FIELD_ERROR"
            case .changeTokenExpired: return "CHANGE_TOKEN_EXPIRED"
            case .unknown(let code): return code
            case .network, .timeout, .responseTooLarge, .malformedResponse: return nil
            }
        }

        public var description: String {
            if let code = serverErrorCode { return code }
            switch self {
            case .network: return "network"
            case .timeout: return "timeout"
            case .responseTooLarge: return "responseTooLarge"
            default: return "malformedResponse"
            }
        }
    }

    public var code: Code
    /// The HTTP status, when a response arrived.
    public var httpStatus: Int?
    /// The server's `reason`, or what went wrong with the transport (secrets scrubbed).
    public var reason: String?
    /// Seconds the server asked to wait (`retryAfter` in the body, or a `Retry-After` header).
    public var retryAfter: Double?
    /// The server's request UUID, for Apple support.
    public var uuid: String?
    /// With AUTHENTICATION_REQUIRED: where a person signs in. Not printed by `description`.
    public var redirectURL: String?
    /// The operation, e.g. `records/changes`.
    public var operation: String
    /// The URL path of the request (never the host's query string, which holds the tokens).
    public var path: String?
    /// How many attempts were made before giving up.
    public var attempts: Int
    /// Set for limits of the client itself (the timeout, `maxResponseBytes`), to name them.
    var limit: String?

    public init(
        code: Code, httpStatus: Int? = nil, reason: String? = nil, retryAfter: Double? = nil,
        uuid: String? = nil, redirectURL: String? = nil, operation: String, path: String? = nil,
        attempts: Int = 1
    ) {
        self.code = code
        self.httpStatus = httpStatus
        self.reason = reason
        self.retryAfter = retryAfter
        self.uuid = uuid
        self.redirectURL = redirectURL
        self.operation = operation
        self.path = path
        self.attempts = attempts
    }

    /// Whether another attempt may succeed: throttling, unavailability, server faults, network
    /// faults, timeouts and bodies that were not JSON. Authentication failures and other 4xx
    /// answers are final; so is a body over `maxResponseBytes`, which the same request would
    /// produce again.
    public var isRetryable: Bool {
        switch code {
        case .throttled, .tryAgainLater, .internalError, .network, .timeout, .malformedResponse:
            return true
        case .responseTooLarge:
            return false
        default:
            if let status = httpStatus { return status == 429 || status >= 500 }
            return false
        }
    }

    /// The web auth token (or the key) needs a person.
    public var isAuthenticationFailure: Bool {
        code == .authenticationFailed || code == .authenticationRequired || httpStatus == 401 || httpStatus == 421
    }

    public var description: String {
        var text = "\(operation): \(advice)"
        var details: [String] = []
        if let reason, !reason.isEmpty { details.append("server said: \(reason)") }
        if let httpStatus { details.append("HTTP \(httpStatus)") }
        if let path { details.append(path) }
        if attempts > 1 { details.append("gave up after \(attempts) attempts") }
        if let uuid { details.append("request \(uuid)") }
        if !details.isEmpty { text += " [" + details.joined(separator: "; ") + "]" }
        return text
    }

    /// What happened and what to do next, as one sentence.
    var advice: String {
        let tag = "(\(code))"
        switch code {
        case .authenticationFailed:
            return "web auth token rejected \(tag): sign in again and set CLOUDKIT_WEB_AUTH_TOKEN (see README: obtaining a web auth token); check CLOUDKIT_API_TOKEN belongs to this container"
        case .authenticationRequired:
            return "web auth token rejected \(tag): sign in again and set CLOUDKIT_WEB_AUTH_TOKEN (see README: obtaining a web auth token)"
        case .accessDenied:
            return "access denied \(tag): check that the container, environment and database are right and that the signed-in user may read them"
        case .badRequest:
            return "the server refused the request \(tag): check the container, zone names and resultsLimit (1...200); on a changes call it means the sync token is no longer accepted"
        case .changeTokenExpired:
            return "the sync token is no longer accepted \(tag): fetch the zone again from the beginning"
        case .zoneNotFound:
            return "the zone does not exist \(tag): check the zone name; it may have been deleted"
        case .notFound:
            return "not found \(tag): check the container identifier, the environment and baseURL"
        case .throttled, .tryAgainLater:
            return "CloudKit asked to slow down \(tag) and did not recover within the retry limits: run again later, or raise the retry budget"
        case .internalError:
            return "CloudKit failed on its side \(tag): run again later"
        case .quotaExceeded:
            return "the quota is exhausted \(tag): free iCloud storage or raise the container's quota"
        case .atomicError, .conflict, .exists, .validatingReferenceError, .uniqueFieldError:
            return "the server refused the request \(tag): this operation conflicts with the data on the server"
        case .unknown(let code):
            return "CloudKit answered with an error code this client does not know (\(code)): run again; if it persists, report it with the request UUID"
        case .network:
            return "could not get an answer from CloudKit \(tag): check the network and baseURL, then run again"
        case .timeout:
            return "CloudKit did not answer in time \(tag): check the network, or raise the timeout\(limit.map { " (now \($0))" } ?? "")"
        case .responseTooLarge:
            return "the response was larger than the client accepts \(tag)\(limit.map { ", \($0)" } ?? ""): lower resultsLimit or raise maxResponseBytes"
        case .malformedResponse:
            return "the answer was not the JSON CloudKit sends \(tag): run again; if it persists, check that baseURL points at CloudKit Web Services"
        }
    }
}

/// The JSON error body of a failed request.
struct ServerErrorBody: Decodable {
    var uuid: String?
    var serverErrorCode: String?
    var reason: String?
    var retryAfter: Double?
    var redirectURL: String?
}
