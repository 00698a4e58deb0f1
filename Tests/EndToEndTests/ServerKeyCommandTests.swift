import Crypto
import Foundation
import TestSupport
import Testing

/// `zonefeed key create`, and what `zonefeed validate` says of a public pipeline's key and its
/// schema file's indexes.
@Suite struct ServerKeyCommandTests {
    @Test func keyCreateWritesAKeyOnlyItsOwnerReadsAndPrintsItsPublicKeyButNeverOverwrites() async throws {
        let zonefeed = try ZonefeedBinary()
        defer { zonefeed.remove() }
        let path = zonefeed.directory.appendingPathComponent("server-key.pem").path

        let created = try await zonefeed.run(["key", "create", path])
        #expect(created.status == 0, "\(created.stderr)")
        let mode = try #require(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int)
        #expect(mode & 0o777 == 0o600)
        let pem = try String(contentsOfFile: path, encoding: .utf8)
        let key = try P256.Signing.PrivateKey(pemRepresentation: pem)
        // Standard output is the public key alone, as `openssl ec -pubout` prints it.
        #expect(created.stdout == key.publicKey.pemRepresentation + "\n")
        #expect(created.stdout.hasPrefix("-----BEGIN PUBLIC KEY-----\n"))
        #expect(created.stderr.contains("fingerprint SHA256:"), "\(created.stderr)")
        #expect(!created.stderr.contains(pem.split(separator: "\n")[1]), "the private key is never printed")

        let again = try await zonefeed.run(["key", "create", path])
        #expect(again.status == 2)
        #expect(again.stderr.contains("it already exists, and a key is never overwritten"), "\(again.stderr)")
        #expect(try String(contentsOfFile: path, encoding: .utf8) == pem)
    }

    @Test func validateOfAPublicPipelineShowsTheKeysFingerprintAndWarnsOfMissingIndexes() async throws {
        let zonefeed = try ZonefeedBinary(environment: ["CK_KEY_ID": "key-id-SECRET-7", "DATABASE_URL": "postgresql://u:pw-SECRET-8@localhost/db"])
        defer { zonefeed.remove() }
        let directory = zonefeed.directory
        #expect(try await zonefeed.run(["key", "create", directory.appendingPathComponent("server-key.pem").path]).status == 0)
        try """
        DEFINE SCHEMA
            RECORD TYPE Score (
                "___modTime"    TIMESTAMP QUERYABLE SORTABLE,
                "___recordID"   REFERENCE QUERYABLE,
                points          INT64 QUERYABLE SORTABLE,
                GRANT READ TO "_world"
            );
            RECORD TYPE Player (
                "___modTime"    TIMESTAMP QUERYABLE,
                name            STRING,
                GRANT READ TO "_world"
            );
        """.write(to: directory.appendingPathComponent("schema.ckdb"), atomically: true, encoding: .utf8)
        let file = directory.appendingPathComponent("scores.yml")
        try """
        pipeline: scores
        source:
          cloudkit:
            container: iCloud.com.example.scores
            database: public
            deletionSweep: { every: 10 runs }
            auth:
              serverKey:
                keyID: ${CK_KEY_ID}
                privateKeyFile: server-key.pem
        destination:
          url: ${DATABASE_URL}
          schema: scores
        recordTypes:
          schemaFile: schema.ckdb
        """.write(to: file, atomically: true, encoding: .utf8)

        let output = try await zonefeed.run(["validate", file.path])
        #expect(output.status == 0, "\(output.stderr)")
        let key = try P256.Signing.PrivateKey(pemRepresentation: String(contentsOf: directory.appendingPathComponent("server-key.pem"), encoding: .utf8))
        let lines = output.stdout.split(separator: "\n").map(String.init)
        let auth = try #require(lines.first { $0.hasPrefix("  auth:") })
        #expect(auth.hasPrefix("  auth:               serverKey keyID <redacted>, privateKeyFile server-key.pem (fingerprint SHA256:"), "\(auth)")
        for line in [
            "  database:           public",
            "  zones:              _defaultZone",
            "  queryLag:           5m: _defaultZone is read again from this long before its watermark each run",
            "  deletionSweep:      every 10 runs: lists every record name of each type, 500 requests per 100,000 records",
            "  warning:            the schema file gives record type Player no ___modTime SORTABLE, ___recordID QUERYABLE index: "
                + "CloudKit refuses its queries until it has them (add them in CloudKit Dashboard, Indexes, and deploy)",
        ] {
            #expect(lines.contains(line), "missing line: \(line)\n\(output.stdout)")
        }
        #expect(!lines.contains { $0.contains("record type Score no") }, "Score has the indexes it needs")
        for secret in ["key-id-SECRET-7", "pw-SECRET-8", String(key.pemRepresentation.split(separator: "\n")[1].prefix(20))] {
            #expect(!output.stdout.contains(secret) && !output.stderr.contains(secret), "\(secret) never appears")
        }
    }
}
