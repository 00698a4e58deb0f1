import CloudKitModel
import Crypto
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Signs requests the way the reference (§5.2) describes:
///
///     SignatureV1 = base64(DER(ECDSA-P256-SHA256("<date>:<base64(sha256(body))>:<path>")))
///
/// where `date` is ISO 8601 in UTC without fractional seconds and `path` is the URL path without
/// host or query. A bodiless GET hashes zero bytes (MistKit hashes an empty string, which is the
/// same thing).
struct RequestSigner: Sendable {
    var key: ServerKey

    struct Headers: Sendable {
        var keyID: String
        var date: String
        var signature: String
    }

    func sign(body: [UInt8], path: String, date: Date) throws -> Headers {
        let dateText = Self.iso8601(date)
        let message = Self.signedString(date: dateText, body: body, path: path)
        let signature = try key.privateKey.signature(for: Array(message.utf8))
        return Headers(keyID: key.keyID, date: dateText, signature: Base64.encode(Array(signature.derRepresentation)))
    }

    static func signedString(date: String, body: [UInt8], path: String) -> String {
        "\(date):\(Base64.encode(Array(SHA256.hash(data: body)))):\(path)"
    }

    /// `2016-01-25T22:15:43Z`.
    static func iso8601(_ date: Date) -> String {
        var time = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&time, &parts)
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z"
    }
}
