import CloudKitModel

/// A response before it becomes HTTP: the store computes these, the responder sends them.
struct Reply: Sendable {
    var status: Int
    var body: [UInt8]
    var contentType: String
    var headers: [(name: String, value: String)]

    init(status: Int = 200, body: [UInt8], contentType: String = "application/json; charset=UTF-8", headers: [(name: String, value: String)] = []) {
        self.status = status
        self.body = body
        self.contentType = contentType
        self.headers = headers
    }

    /// A CloudKit error body with its HTTP status.
    static func error(_ status: Int, _ code: String, _ reason: String, redirectURL: String? = nil, retryAfter: Double? = nil) -> Reply {
        Reply(status: status, body: errorBody(code: code, reason: reason, redirectURL: redirectURL, retryAfter: retryAfter))
    }

    static func badRequest(_ reason: String) -> Reply { .error(400, "BAD_REQUEST", reason) }

    /// An admin endpoint's answer.
    static func admin(_ value: JSONValue, status: Int = 200) -> Reply {
        var w = JSONWriter()
        w.write(value)
        return Reply(status: status, body: w.bytes)
    }

    /// An admin endpoint's error: `{"error": "…"}`.
    static func adminError(_ message: String, status: Int = 400) -> Reply {
        .admin(.object(["error": .string(message)]), status: status)
    }
}

/// Whether `name` is an HTTP field name (RFC 9110 `token`).
func isHeaderName(_ name: String) -> Bool {
    !name.isEmpty
        && name.utf8.allSatisfy { c in
            (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || "!#$%&'*+-.^_`|~".utf8.contains(c)
        }
}
