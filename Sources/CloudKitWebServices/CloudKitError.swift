import Foundation

/// A failed CloudKit Web Services call: the server's error body (`{uuid, serverErrorCode, reason,
/// retryAfter?, redirectURL?}`) or a transport fault, with the operation it concerns.
///
/// `description` is a sentence that says what to do next. It never contains a token, a key or a
/// query string: the request is named by its URL path only, and the client scrubs its secrets out
/// of anything the server echoes back.
public struct CloudKitError: Error, Sendable, CustomStringConvertible {
    /// A server's `serverErrorCode` (reference §6, plus CloudKit JS's extras), kept as sent when
    /// this client does not know it, or a fault of the transport. A struct rather than an enum,
    /// so that a new code breaks no caller's switch.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        /// The wire spelling for server codes (`ZONE_NOT_FOUND`); nil for transport faults.
        public let serverErrorCode: String?
        private let fault: String?

        public init(serverErrorCode: String) {
            self.serverErrorCode = serverErrorCode
            fault = nil
        }

        private init(fault: String) {
            serverErrorCode = nil
            self.fault = fault
        }

        public static let accessDenied = Code(serverErrorCode: "ACCESS_DENIED")
        public static let atomicError = Code(serverErrorCode: "ATOMIC_ERROR")
        public static let authenticationFailed = Code(serverErrorCode: "AUTHENTICATION_FAILED")
        public static let authenticationRequired = Code(serverErrorCode: "AUTHENTICATION_REQUIRED")
        public static let badRequest = Code(serverErrorCode: "BAD_REQUEST")
        public static let conflict = Code(serverErrorCode: "CONFLICT")
        public static let exists = Code(serverErrorCode: "EXISTS")
        public static let internalError = Code(serverErrorCode: "INTERNAL_ERROR")
        public static let notFound = Code(serverErrorCode: "NOT_FOUND")
        public static let quotaExceeded = Code(serverErrorCode: "QUOTA_EXCEEDED")
        public static let throttled = Code(serverErrorCode: "THROTTLED")
        public static let tryAgainLater = Code(serverErrorCode: "TRY_AGAIN_LATER")
        public static let validatingReferenceError = Code(serverErrorCode: "VALIDATING_REFERENCE_ERROR")
        public static let zoneNotFound = Code(serverErrorCode: "ZONE_NOT_FOUND")
        public static let uniqueFieldError = Code(serverErrorCode: "UNIQUE_FIELD_ERROR")
        public static let changeTokenExpired = Code(serverErrorCode: "CHANGE_TOKEN_EXPIRED")

        /// The server could not be reached, or the connection broke (a body cut short too).
        public static let network = Code(fault: "network")
        /// No complete answer within the configured timeout.
        public static let timeout = Code(fault: "timeout")
        /// The body was larger than `maxResponseBytes`.
        public static let responseTooLarge = Code(fault: "responseTooLarge")
        /// The body was not the JSON the operation returns.
        public static let malformedResponse = Code(fault: "malformedResponse")
        /// The request could not be signed with the server-to-server key.
        public static let signingFailed = Code(fault: "signingFailed")
        /// A 421 without CloudKit's JSON body: Apple's edge, for a connection made for another
        /// host. Retried once on a fresh connection by the client, never by the retry policy.
        public static let misdirected = Code(fault: "misdirected")
        /// The TLS handshake failed: a certificate that does not verify, a host name it is not
        /// for, a handshake that never finishes. Never retried.
        public static let tlsFailed = Code(fault: "tls")

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

        public var description: String { serverErrorCode ?? fault ?? "" }
    }

    public var code: Code
    /// The HTTP status, when a response arrived.
    public var httpStatus: Int?
    /// The server's `reason`, or what went wrong with the transport (secrets scrubbed).
    public var reason: String?
    /// Seconds the server asked to wait (`retryAfter` in the body, or a `Retry-After` header),
    /// at most the client's `maxRetryAfter`.
    public var retryAfter: Double?
    /// What the server asked for, when it was more than `maxRetryAfter`.
    public var retryAfterAsked: Double?
    /// The retries ended because the next wait would not end within the retry budget.
    public var budgetExceeded = false
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
    /// With `tlsFailed`: the host and port the connection was for.
    var tlsHost: String?
    /// The request was signed with a server-to-server key rather than a user's token: an
    /// authentication failure is the key's.
    public var signedWithServerKey = false
    /// The answer was CloudKit's error body, with its `serverErrorCode`; false for a code read
    /// from the status alone (a proxy's page, an empty answer) and for faults of the transport.
    public var sentByCloudKit = false

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
        code == .authenticationFailed || code == .authenticationRequired || httpStatus == 401 || (httpStatus == 421 && code != .misdirected)
    }

    public var description: String {
        var text = "\(operation): \(advice)"
        var details: [String] = []
        if let reason, !reason.isEmpty { details.append("server said: \(reason)") }
        if let httpStatus { details.append("HTTP \(httpStatus)") }
        if let path { details.append(path) }
        if let retryAfter {
            let asked = retryAfterAsked.map { "asked to wait \(Self.seconds($0)), taken as \(Self.seconds(retryAfter))" }
            details.append(asked ?? "asked to wait \(Self.seconds(retryAfter))")
        }
        if budgetExceeded {
            details.append("gave up after \(attempts) attempt\(attempts == 1 ? "" : "s"): the next wait would not end within the retry budget")
        } else if attempts > 1 {
            details.append("gave up after \(attempts) attempts")
        }
        if let uuid { details.append("request \(uuid)") }
        if !details.isEmpty { text += " [" + details.joined(separator: "; ") + "]" }
        return text
    }

    /// An authentication failure of a signed request, by what CloudKit's reason names: the key
    /// ID, the signature (the key is not the one registered under that ID), or the date.
    var serverKeyAdvice: String {
        let tag = "(\(code))"
        let said = (reason ?? "").lowercased()
        let fingerprint = "zonefeed validate shows this key's fingerprint; zonefeed key create makes a new key and prints its public key"
        if said.contains("key id") || said.contains("keyid") || said.contains("unknown key") {
            return "CloudKit does not know the server-to-server key ID \(tag): set auth.serverKey.keyID to the key ID CloudKit Dashboard shows "
                + "for this container and environment (API Access, Server-to-Server Keys)"
        }
        let clock =
            "CloudKit refused the server-to-server signature as too old or too new \(tag): set this machine's clock right (use NTP); "
            + "CloudKit accepts signatures dated within minutes of its own time"
        if said.contains("clock") || said.contains("too old") || said.contains("expired") { return clock }
        if said.contains("signature") {
            return "the server-to-server key does not match the key ID \(tag): the private key is not the one whose public key was registered "
                + "under that ID in CloudKit Dashboard; give the matching private key, or register this key's public key (\(fingerprint))"
        }
        if said.contains("date") { return clock }
        return "CloudKit refused the server-to-server key \(tag): check auth.serverKey.keyID against CloudKit Dashboard, that its public key "
            + "is this private key's (\(fingerprint)), that the key is for this container and environment, and this machine's clock"
    }

    /// What happened and what to do next, as one sentence.
    var advice: String {
        let tag = "(\(code))"
        if signedWithServerKey, isAuthenticationFailure { return serverKeyAdvice }
        switch code {
        case .authenticationFailed:
            return
                "web auth token rejected \(tag): sign in again (zonefeed login, or a new CLOUDKIT_WEB_AUTH_TOKEN; see README: signing in); check CLOUDKIT_API_TOKEN belongs to this container"
        case .authenticationRequired:
            return
                "web auth token rejected \(tag): the session has ended, or no token was given; sign in again (zonefeed login, or a new CLOUDKIT_WEB_AUTH_TOKEN; see README: signing in)"
        case .accessDenied:
            return "access denied \(tag): check that the container, environment and database are right and that the signed-in user may read them"
        case .badRequest:
            return
                "the server refused the request \(tag): check the container, zone names and resultsLimit (1...200); on a changes call it means the sync token is no longer accepted"
        case .changeTokenExpired:
            return "the sync token is no longer accepted \(tag): fetch the zone again from the beginning"
        case .zoneNotFound:
            return "the zone does not exist \(tag): check the zone name; it may have been deleted"
        case .notFound:
            return "not found \(tag): check the container identifier, the environment and baseURL"
        case .throttled, .tryAgainLater:
            return
                "CloudKit asked to slow down \(tag) and did not recover within the retry limits: run again later, or raise retryBudgetSeconds (and maxRetryAfterSeconds for longer waits)"
        case .internalError:
            return "CloudKit failed on its side \(tag): run again later"
        case .quotaExceeded:
            return "the quota is exhausted \(tag): free iCloud storage or raise the container's quota"
        case .atomicError, .conflict, .exists, .validatingReferenceError, .uniqueFieldError:
            return "the server refused the request \(tag): this operation conflicts with the data on the server"
        case .network:
            return "could not get an answer from CloudKit \(tag): check the network and baseURL, then run again"
        case .timeout:
            return "CloudKit did not answer in time \(tag): check the network, or raise timeoutSeconds\(limit.map { " (now \($0))" } ?? "")"
        case .responseTooLarge:
            return "the response was larger than the client accepts \(tag)\(limit.map { ": \($0)" } ?? ""): lower resultsLimit, or raise that limit"
        case .malformedResponse:
            return "the answer was not the JSON CloudKit sends \(tag): run again; if it persists, check that baseURL points at CloudKit Web Services"
        case .misdirected:
            return
                "CloudKit's edge answered 421 Misdirected Request on a fresh connection too \(tag): a proxy or load balancer between here and CloudKit may be sending requests to the wrong host; run again, and check the network path if it persists"
        case .tlsFailed:
            return
                "could not make a trusted TLS connection to \(tlsHost ?? "CloudKit") \(tag): if a proxy inspects TLS or the server's certificate comes from a private CA, give that CA's certificate as source.cloudkit.tls.caFile; check baseURL's host name; this is not retried"
        case .signingFailed:
            return "the request could not be signed \(tag): check that auth.serverKey holds the PEM private key (prime256v1) of its keyID"
        default:
            return "CloudKit answered with an error code this client does not know (\(code)): run again; if it persists, report it with the request UUID"
        }
    }
}

/// The JSON error body of a failed request, read leniently: each member is taken when it has
/// the expected type, so that one odd member (a `retryAfter` of "soon", a number too large for a
/// Double) does not lose the others; a body that is not JSON at all gives nothing.
struct ServerErrorBody: Decodable {
    var uuid: String?
    var serverErrorCode: String?
    var reason: String?
    var retryAfter: Double?
    var redirectURL: String?

    init(_ bytes: Data) {
        bytes.withUnsafeBytes { raw in
            var json = JSONReader(raw.bindMemory(to: UInt8.self))
            guard (try? json.beginObject()) != nil else { return }
            while let key = try? json.nextKey() {
                let value = try? json.readValue()
                switch (key, value) {
                case ("uuid", .string(let text)?): uuid = text
                case ("serverErrorCode", .string(let text)?): serverErrorCode = text
                case ("reason", .string(let text)?): reason = text
                case ("redirectURL", .string(let text)?): redirectURL = text
                case ("retryAfter", .int(let n)?): retryAfter = Double(n)
                case ("retryAfter", .double(let n)?) where n.isFinite: retryAfter = n
                case ("retryAfter", .double(_)?): retryAfter = .infinity  // a number past Double's range
                case (_, nil): return
                default: continue
                }
            }
        }
    }

    /// An error entry within an answer (a zone's in `zones/list`), read as tolerantly as a
    /// body is: a member of an unexpected type (`"retryAfter":"soon"`, a numeric uuid) is left
    /// out, where the synthesized reading refused the whole answer, and a run of `zones: all`
    /// failed for one odd entry.
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        uuid = try? c.decodeIfPresent(String.self, forKey: .uuid)
        serverErrorCode = try? c.decodeIfPresent(String.self, forKey: .serverErrorCode)
        reason = try? c.decodeIfPresent(String.self, forKey: .reason)
        retryAfter = try? c.decodeIfPresent(Double.self, forKey: .retryAfter)
        redirectURL = try? c.decodeIfPresent(String.self, forKey: .redirectURL)
    }

    private enum CodingKeys: String, CodingKey { case uuid, serverErrorCode, reason, retryAfter, redirectURL }
}

extension CloudKitError {
    /// `12 s`, `0.25 s`, `1e+09 s`.
    static func seconds(_ value: Double) -> String {
        value.isFinite && value < 1e7 ? String(format: "%g s", value) : String(format: "%.3g s", value)
    }
}
