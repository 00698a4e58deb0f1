import CloudKitModel
import Crypto
import Foundation

/// A server-to-server key: the key ID CloudKit Dashboard shows and the P-256 private key whose
/// public half was uploaded there (`openssl ecparam -name prime256v1 -genkey -noout -out eckey.pem`).
public struct ServerKey: Sendable, CustomStringConvertible {
    public var keyID: String
    /// The key's raw scalar; swift-crypto's key type is not `Sendable` on every platform.
    private let rawKey: [UInt8]

    public init(keyID: String, privateKey: P256.Signing.PrivateKey) {
        self.keyID = keyID
        self.rawKey = Array(privateKey.rawRepresentation)
    }

    public var privateKey: P256.Signing.PrivateKey {
        // The bytes came from a valid key.
        try! P256.Signing.PrivateKey(rawRepresentation: rawKey)
    }

    /// From PEM text: `BEGIN EC PRIVATE KEY` (what openssl writes) or `BEGIN PRIVATE KEY` (PKCS #8).
    public init(keyID: String, pem: String) throws {
        do {
            self.init(keyID: keyID, privateKey: try P256.Signing.PrivateKey(pemRepresentation: pem))
        } catch {
            // The key itself must not end up in a message.
            throw ServerKeyError(
                message:
                    "the server-to-server private key is not a P-256 key in PEM form: create one with 'zonefeed key create' "
                    + "(or 'openssl ecparam -name prime256v1 -genkey -noout -out eckey.pem') and register its public key in CloudKit Dashboard"
            )
        }
    }

    /// The most a PEM key file is read: a P-256 key is a few hundred bytes, a chain of
    /// certificates beside it a few kilobytes.
    static let maxFileBytes = 64 * 1024

    /// From a PEM file, read as a secret (`SecretFile`): not through a symbolic link, the user's
    /// own (or root's), unreadable by group and others, at most `maxFileBytes`.
    public init(keyID: String, pemFile path: String) throws {
        let pem: String?
        do {
            pem = try SecretFile.read(path, what: "server-to-server private key file", maxBytes: Self.maxFileBytes)
        } catch {
            throw ServerKeyError(message: "\(error)")
        }
        guard let pem else {
            throw ServerKeyError(
                message: "cannot read the server-to-server private key file \(path): there is no such file; check auth.serverKey.privateKeyFile")
        }
        try self.init(keyID: keyID, pem: pem)
    }

    /// A new key, not yet registered: its ID is what CloudKit Dashboard gives it once its public
    /// key is pasted there.
    public static func generate() -> ServerKey {
        ServerKey(keyID: "", privateKey: P256.Signing.PrivateKey())
    }

    /// The private key in PEM (PKCS #8, `BEGIN PRIVATE KEY`, which `openssl ec` also reads). A
    /// secret: for the key's own file only.
    public var privateKeyPEM: String { privateKey.pemRepresentation }

    /// The public key as CloudKit Dashboard takes it pasted: PEM, `BEGIN PUBLIC KEY`.
    public var publicKeyPEM: String { privateKey.publicKey.pemRepresentation }

    /// What names the key without showing it: `SHA256:` and the base64 of the SHA-256 of its
    /// public key (DER), as `ssh-keygen -l` names keys.
    public var fingerprint: String {
        var text = Base64.encode(Array(SHA256.hash(data: privateKey.publicKey.derRepresentation)))
        while text.hasSuffix("=") { text.removeLast() }
        return "SHA256:" + text
    }

    /// Neither the key nor its ID: the fingerprint names it.
    public var description: String { "ServerKey(\(fingerprint))" }
}

public struct ServerKeyError: Error, Sendable, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}
