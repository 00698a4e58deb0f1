import CloudKitModel
import Crypto
import Foundation

/// Requests signed with a server-to-server key (the reference's §5.2): the three headers, and
/// an ECDSA P-256 signature over `<date>:<base64(sha256(body))>:<path>`. Where the reference is
/// silent the fake takes the stricter reading, as the docs say (docs/fake-server.md):
///
/// - the signed path is the URL's path alone, without its query string;
/// - a request without a body hashes zero bytes;
/// - a signature more than `signatureMaxAge` from the server's clock, either way, is refused;
/// - a key reaches the public database only, and a request carries a key or a web auth token,
///   not both.
extension FakeCloudKitStore {
    /// The three headers of a signed request, as they arrived.
    struct RequestSignature: Sendable {
        var keyID: String
        var date: String
        var signature: String
    }

    /// How far a signature's date may be from the server's clock.
    static let signatureMaxAge: TimeInterval = 300

    /// nil when the signature is good; else the refusal, 401 `AUTHENTICATION_FAILED` with a
    /// reason that says which check failed.
    func refusal(of signed: RequestSignature, path: String, body: [UInt8], database: String, now: Date = Date()) -> Reply? {
        func refused(_ reason: String) -> Reply { .error(401, "AUTHENTICATION_FAILED", reason) }
        // The device API too (push tokens for the public database's query subscriptions): the
        // key's developer is the device's user. Unverified; the reading that lets a headless
        // watcher listen.
        guard database == "public" || database == "device" else {
            return refused("a server-to-server key reaches the public database only, not the \(database) database")
        }
        guard let key = serverPublicKeys[signed.keyID] else {
            return refused("unknown key ID (X-Apple-CloudKit-Request-KeyID): no server-to-server key with that ID")
        }
        guard let date = Self.iso8601Date(signed.date) else {
            return refused("X-Apple-CloudKit-Request-ISO8601Date is not a date like 2016-01-25T22:15:43Z")
        }
        guard abs(date.timeIntervalSince(now)) <= Self.signatureMaxAge else {
            return refused("the request's date is more than \(Int(Self.signatureMaxAge)) seconds from the server's clock")
        }
        guard let signatureBytes = Data(base64Encoded: signed.signature),
            let signature = try? P256.Signing.ECDSASignature(derRepresentation: signatureBytes)
        else {
            return refused("X-Apple-CloudKit-Request-SignatureV1 is not a base64 DER ECDSA signature")
        }
        let bodyHash = Data(SHA256.hash(data: body)).base64EncodedString()
        let message = Array("\(signed.date):\(bodyHash):\(path)".utf8)
        guard key.isValidSignature(signature, for: message) else {
            return refused("the signature does not verify with the key of that ID (another key, or a changed body, date or path)")
        }
        return nil
    }

    /// `2016-01-25T22:15:43Z`, without fractional seconds, as the reference writes it.
    static func iso8601Date(_ text: String) -> Date? {
        guard text.utf8.count == 20, text.hasSuffix("Z") else { return nil }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: text)
    }

    /// The configured public keys by key ID, read from their PEM text.
    static func serverPublicKeys(_ pems: [String: String]) throws -> [String: P256.Signing.PublicKey] {
        var keys: [String: P256.Signing.PublicKey] = [:]
        for (keyID, pem) in pems {
            do { keys[keyID] = try P256.Signing.PublicKey(pemRepresentation: pem) } catch {
                throw FakeServerKeyError(
                    message: "the server key \(keyID) is not a P-256 public key in PEM: give the output of openssl ec -in KEY.pem -pubout")
            }
        }
        return keys
    }
}

struct FakeServerKeyError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}
