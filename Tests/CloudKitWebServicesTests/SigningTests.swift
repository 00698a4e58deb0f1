import CloudKitWebServices
import Crypto
import Foundation
import Testing

@Suite struct SigningTests {
    /// Recomputes `date:base64(sha256(body)):path` from what the server received and checks the
    /// signature with the public key, as CloudKit does.
    func verify(_ request: CannedServer.Request, keyID: String, publicKey: P256.Signing.PublicKey) throws {
        #expect(request.headers.first(name: "X-Apple-CloudKit-Request-KeyID") == keyID)
        let date = try #require(request.headers.first(name: "X-Apple-CloudKit-Request-ISO8601Date"))
        #expect(date.wholeMatch(of: /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z/) != nil, "UTC without fractional seconds: \(date)")
        let signatureText = try #require(request.headers.first(name: "X-Apple-CloudKit-Request-SignatureV1"))
        let signature = try P256.Signing.ECDSASignature(derRepresentation: try #require(Data(base64Encoded: signatureText)))
        let bodyHash = Data(SHA256.hash(data: Data(request.body))).base64EncodedString()
        let signed = "\(date):\(bodyHash):\(request.path)"
        #expect(publicKey.isValidSignature(signature, for: Data(signed.utf8)))
    }

    @Test func requestsAreSignedWithTheServerKey() async throws {
        let key = P256.Signing.PrivateKey()
        let serverKey = try ServerKey(keyID: "key-123", pem: key.pemRepresentation)
        try await withServer(configure: {
            $0.serverKey = serverKey
            $0.database = .public
            $0.webAuthToken = nil
        }) { server, client in
            server.enqueue(.json(200, #"{"zones":[],"syncToken":"d","moreComing":false}"#), .json(200, #"{"users":[{"userRecordName":"_dev"}]}"#))
            _ = try await client.fetchDatabaseChanges(syncToken: "db+1/=")
            _ = try await client.caller()
            #expect(server.requests.count == 2)
            #expect(!server.requests[0].body.isEmpty)
            try verify(server.requests[0], keyID: "key-123", publicKey: key.publicKey)
            #expect(server.requests[1].body.isEmpty, "a GET signs the hash of zero bytes")
            try verify(server.requests[1], keyID: "key-123", publicKey: key.publicKey)
            #expect(server.requests[1].query.contains("ckAPIToken="), "the query is not part of the signed path")
            #expect(!"\(serverKey)".contains("BEGIN"))
        }
    }

    @Test func aKeyThatIsNotPEMIsRefusedWithoutEchoingIt() throws {
        let error = try #require(throws: ServerKeyError.self) { try ServerKey(keyID: "k", pem: "not-a-key-\(Secrets.apiToken)") }
        #expect(!error.description.contains(Secrets.apiToken))
        #expect(error.description.contains("openssl ecparam"))
    }

    /// The private key file is a secret, read as a token file is: its own private file, small,
    /// never through a symbolic link; a key planted elsewhere or left readable is refused with a
    /// sentence that quotes nothing of it.
    @Test(arguments: ["its own private file", "symbolic link", "readable by others", "a gigabyte", "missing"])
    func theKeyFileIsReadAsASecret(kind: String) throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let file = folder + "/eckey.pem"
        let key = P256.Signing.PrivateKey()
        func write(mode: mode_t) throws {
            try key.pemRepresentation.write(toFile: file, atomically: true, encoding: .utf8)
            #expect(chmod(file, mode) == 0)
        }
        let expected: String
        switch kind {
        case "its own private file":
            try write(mode: 0o600)
            #expect(try ServerKey(keyID: "k", pemFile: file).privateKey.rawRepresentation == key.rawRepresentation)
            return
        case "symbolic link":
            try key.pemRepresentation.write(toFile: folder + "/elsewhere.pem", atomically: true, encoding: .utf8)
            #expect(chmod(folder + "/elsewhere.pem", 0o600) == 0)
            #expect(symlink(folder + "/elsewhere.pem", file) == 0)
            expected = "is a symbolic link"
        case "readable by others":
            try write(mode: 0o644)
            expected = "group or others may access it (mode 644)"
        case "a gigabyte":
            makeSparseFile(file, bytes: 1 << 30)
            expected = "larger than 65536 bytes"
        default:
            expected = "there is no such file"
        }
        let error = try #require(throws: ServerKeyError.self) { try ServerKey(keyID: "k", pemFile: file) }
        #expect(error.description.contains("server-to-server private key file \(file)"), "\(error)")
        #expect(error.description.contains(expected), "\(error)")
        #expect(!error.description.contains("BEGIN"), "nothing of the key is quoted")
    }
}
