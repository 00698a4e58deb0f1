import CloudKitModel
import Crypto
import FakeCloudKitServer
import Foundation
import Testing

/// Requests signed with a server-to-server key, checked as CloudKit checks them: the key's ID,
/// the signature over date, body hash and path, and the date against the server's clock.
@Suite struct ServerKeyTests {
    typealias Harness = FakeServerHarness

    /// One key for the suite, kept as its bytes (the key type is not Sendable).
    static let keyBytes = P256.Signing.PrivateKey().rawRepresentation
    static var key: P256.Signing.PrivateKey { try! P256.Signing.PrivateKey(rawRepresentation: keyBytes) }
    static let keyID = "0123456789abcdef0123456789abcdef01234567890abcdef0123456789abcd"

    static func configuration() -> FakeCloudKitServer.Configuration {
        var configuration = QueryTests.configuration(publicRecords: 300)
        configuration.serverKeys = [keyID: key.publicKey.pemRepresentation]
        return configuration
    }

    /// `2016-01-25T22:15:43Z`.
    static func iso8601(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.string(from: date)
    }

    /// The three headers for `body` sent to `path`, signed with `key` as of `date`.
    static func headers(
        path: String, body: [UInt8], key: P256.Signing.PrivateKey? = nil, keyID: String = keyID, date: Date = Date()
    ) throws -> [(String, String)] {
        let key = key ?? Self.key
        let dateText = iso8601(date)
        let message = "\(dateText):\(Data(SHA256.hash(data: body)).base64EncodedString()):\(path)"
        let signature = try key.signature(for: Array(message.utf8)).derRepresentation.base64EncodedString()
        return [
            ("X-Apple-CloudKit-Request-KeyID", keyID), ("X-Apple-CloudKit-Request-ISO8601Date", dateText),
            ("X-Apple-CloudKit-Request-SignatureV1", signature),
        ]
    }

    static func path(_ server: Harness, database: String = "public") -> String {
        "/database/1/\(server.configuration.container)/\(server.configuration.environment)/\(database)/records/query"
    }

    static let body = Array(QueryTests.query("Note", limit: 5).jsonText.utf8)

    func send(_ server: Harness, database: String = "public", bytes: [UInt8] = body, headers: [(String, String)]) async throws -> Harness.Answer {
        try await server.send(server.url(database: database, operation: "records/query", webAuthToken: nil, apiToken: nil), bytes: bytes, headers: headers)
    }

    @Test func aSignedQueryReachesThePublicDatabaseWithoutAWebAuthToken() async throws {
        try await Harness.with(Self.configuration()) { server in
            let answer = try await send(server, headers: try Self.headers(path: Self.path(server), body: Self.body))
            #expect(answer.status == 200, "\(String(decoding: answer.bytes, as: UTF8.self))")
            #expect(answer.json?["records"]?.arrayValue?.count == 5)
            #expect(answer.rotatedToken == nil, "no user, so no web auth token")
        }
    }

    @Test func eachBadSignatureIsRefusedSayingWhy() async throws {
        try await Harness.with(Self.configuration()) { server in
            let path = Self.path(server)
            let other = P256.Signing.PrivateKey()
            var tampered = Self.body
            tampered[tampered.count - 2] = UInt8(ascii: "6")  // resultsLimit 5 → 6, after signing
            let cases: [(String, [UInt8], [(String, String)], String)] = [
                ("an unknown key ID", Self.body, try Self.headers(path: path, body: Self.body, keyID: "not-a-key"), "unknown key ID"),
                ("another key", Self.body, try Self.headers(path: path, body: Self.body, key: other), "the signature does not verify"),
                ("a body changed after signing", tampered, try Self.headers(path: path, body: Self.body), "the signature does not verify"),
                (
                    "a signature of ten minutes ago", Self.body, try Self.headers(path: path, body: Self.body, date: Date().addingTimeInterval(-600)),
                    "the request's date is more than 300 seconds from the server's clock"
                ),
                (
                    "another path", Self.body, try Self.headers(path: path.replacingOccurrences(of: "records/query", with: "records/lookup"), body: Self.body),
                    "the signature does not verify"
                ),
            ]
            for (what, bytes, headers, reason) in cases {
                let answer = try await send(server, bytes: bytes, headers: headers)
                #expect(answer.status == 401, "\(what)")
                #expect(answer.json?["serverErrorCode"]?.stringValue == "AUTHENTICATION_FAILED", "\(what)")
                #expect(answer.json?["reason"]?.stringValue?.hasPrefix(reason) == true, "\(what): \(answer.json?["reason"]?.stringValue ?? "")")
            }
            // A request carries a key or a user's token, not both (the reference is silent: the
            // stricter reading).
            let both = try await server.send(
                server.url(database: "public", operation: "records/query", webAuthToken: Harness.initialWebToken), bytes: Self.body,
                headers: try Self.headers(path: path, body: Self.body))
            #expect(both.status == 400)
            #expect(both.json?["reason"]?.stringValue == "a request is signed with a server-to-server key or carries a web auth token, not both")
            // A key reaches the public database only.
            let privatePath = Self.path(server, database: "private")
            let privateAnswer = try await send(server, database: "private", headers: try Self.headers(path: privatePath, body: Self.body))
            #expect(privateAnswer.status == 401)
            #expect(privateAnswer.json?["reason"]?.stringValue?.hasPrefix("a server-to-server key reaches the public database only") == true)
        }
    }
}
