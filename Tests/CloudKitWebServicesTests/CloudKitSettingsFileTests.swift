import Crypto
import FakeCloudKit
import Foundation
import Logging
import Testing
import ZoneFeed
import ZoneFeedCloudKit

// The `source.cloudkit` section, as ZoneFeedCloudKit reads it. Each YAML literal starts at line
// 1, column 1, so the expected `notes.yml:line:column` can be read off the literal itself.

/// A destination that reads only its `url`, and the record types it maps (`types`, none: it
/// takes whatever comes): what a file needs besides its source.
private struct PlainDestination: DestinationConfiguration {
    static let reference = PipelineReference(
        component: "plain",
        keys: [
            .section("destination", "Nothing."), PipelineKey("destination.url", takes: "text", "Nothing."),
            PipelineKey("destination.types", takes: "a list", "The record types mapped."),
        ])
    static let topLevelKeys: [String] = []
    static func read(_ top: PipelineSection, pipelineName: String?, from file: PipelineFileReader) -> PlainDestination? {
        guard let section = file.subsection("destination", in: top, allowed: reference.keys.keys(in: "destination"), required: true) else {
            return nil
        }
        return PlainDestination(mappedRecordTypes: file.stringList("types", in: section, expected: "a list"))
    }
    static let key = "url"
    var commitEvery = 1
    var parallelZones = 1
    var mappedRecordTypes: [String]?

    /// Only read, never opened: these tests run no command.
    func open<T>(pipelineName: String, logger: Logger, _ body: (any OpenedDestination) async throws -> T) async throws -> T {
        throw DestinationUnavailableError(.serverDidNotStart, "a plain destination is only read")
    }

    func plan(_ context: PlanContext) -> [String] { ["destination: plain"] }
}

private let components = PipelineComponents(sources: [CloudKitSettings.self, FakeSettings.self], destinations: [PlainDestination.self])

/// The diagnostics a file is refused with, as printed; empty when the file is accepted.
private func problems(_ yaml: String, environment: [String: String] = [:]) -> [String] {
    do {
        _ = try Pipeline.parse(yaml: yaml, filePath: "notes.yml", components: components, environment: environment)
        return []
    } catch let error as PipelineFileError {
        return error.diagnostics.map(\.description)
    } catch {
        return ["unexpected \(type(of: error)): \(error)"]
    }
}

private func parse(_ yaml: String) throws -> Pipeline {
    try Pipeline.parse(yaml: yaml, filePath: "notes.yml", components: components, environment: [:])
}

/// A CloudKit source whose API token comes from the environment.
private let cloudKitWithToken = """
    pipeline: notes
    source:
      cloudkit:
        container: iCloud.com.example.notes
        auth:
          apiToken: ${CLOUDKIT_API_TOKEN}
    destination:
      url: embedded
    """

@Test func explicitZoneListAndRequestSettingsAreRead() throws {
    let pipeline = try parse(
        """
        pipeline: notes
        source:
          cloudkit:
            baseURL: http://127.0.0.1:8080/
            container: iCloud.com.example.notes
            environment: development
            database: shared
            zones: [Notes, Archive]
            resultsLimit: 50
            desiredKeys: [title, body]
            timeoutSeconds: 2.5
            maxAttempts: 3
            retryBudgetSeconds: 0
            auth:
              apiToken: abc123
        destination:
          url: embedded
        """
    )
    guard let cloudKit = pipeline.source as? CloudKitSettings else {
        Issue.record("expected a CloudKit source")
        return
    }
    #expect(cloudKit.baseURL == "http://127.0.0.1:8080")  // the client appends paths starting with '/'
    #expect(cloudKit.environment == .development)
    #expect(cloudKit.database == .shared)
    #expect(cloudKit.zones == .named(["Notes", "Archive"]))
    #expect(cloudKit.resultsLimit == 50)
    #expect(cloudKit.desiredKeys == ["title", "body"])
    #expect(cloudKit.timeoutSeconds == 2.5)
    #expect(cloudKit.maxAttempts == 3)
    #expect(cloudKit.retryBudgetSeconds == 0)
    #expect(cloudKit.auth.apiToken == Secret("abc123"))
    #expect(cloudKit.auth.serverKey == nil)
}

@Test func resultsLimitOutOfRangeIsRefused() {
    let yaml = cloudKitWithToken.replacingOccurrences(of: "    auth:", with: "    resultsLimit: 500\n    auth:")
    #expect(
        problems(yaml, environment: ["CLOUDKIT_API_TOKEN": "t"]) == [
            "notes.yml:5:19: source.cloudkit.resultsLimit must be a whole number from 1 to 200, not '500'"
        ]
    )
}

@Test func thePublicDatabaseIsReadByQueryAndNeedsTheRecordTypesNamed() {
    let yaml = cloudKitWithToken.replacingOccurrences(of: "    auth:", with: "    database: public\n    auth:")
    #expect(
        problems(yaml, environment: ["CLOUDKIT_API_TOKEN": "t"]) == [
            "notes.yml:2:1: recordTypes: auto cannot be used with this source: it reads _defaultZone of the public database with records/query, "
                + "which asks for one record type at a time; list the record types under recordTypes, or derive them from a schema file "
                + "(recordTypes: { schemaFile: schema.ckdb })"
        ]
    )
}

@Test func containerMustBeAnICloudIdentifier() {
    let yaml = cloudKitWithToken.replacingOccurrences(of: "iCloud.com.example.notes", with: "com.example.notes")
    #expect(
        problems(yaml, environment: ["CLOUDKIT_API_TOKEN": "t"]) == [
            "notes.yml:4:16: container 'com.example.notes' must be a CloudKit container identifier starting with 'iCloud.', such as iCloud.com.example.notes"
        ]
    )
}

@Test func zonesMustBeAllOrANonEmptyList() {
    let single = cloudKitWithToken.replacingOccurrences(of: "    auth:", with: "    zones: Notes\n    auth:")
    #expect(
        problems(single, environment: ["CLOUDKIT_API_TOKEN": "t"]) == [
            "notes.yml:5:12: source.cloudkit.zones must be 'all' or a list of zone names such as [Notes, Archive], not 'Notes' (did you mean [Notes]?)"
        ]
    )
    let empty = cloudKitWithToken.replacingOccurrences(of: "    auth:", with: "    zones: []\n    auth:")
    #expect(
        problems(empty, environment: ["CLOUDKIT_API_TOKEN": "t"]) == [
            "notes.yml:5:12: source.cloudkit.zones is an empty list: name at least one zone, or write 'zones: all'"
        ]
    )
}

@Test func apiTokenIsRequiredUnlessServerToServerKeysAreGiven() {
    let none = """
        pipeline: notes
        source:
          cloudkit:
            container: iCloud.com.example.notes
            auth:
              webAuthTokenFile: token
        destination:
          url: embedded
        """
    #expect(
        problems(none) == [
            "notes.yml:5:5: missing required key 'apiToken' in source.cloudkit.auth (or, for the public database, sign requests server-to-server with serverKey)"
        ]
    )
    let halfKey = none.replacingOccurrences(of: "webAuthTokenFile: token", with: "serverKey: { keyID: abc }")
    #expect(
        problems(halfKey) == [
            "notes.yml:6:7: source.cloudkit.auth.serverKey needs privateKeyFile (the PEM file 'zonefeed key create' wrote) or privateKey (the PEM itself, from a variable)",
            "notes.yml:6:7: source.cloudkit.auth.serverKey: a server-to-server key reaches the public database only (database: public); the private database needs a user's web auth token (zonefeed login)",
        ]
    )
}

/// A token of megabytes is a variable set to the wrong thing (a file's contents, say): refused at
/// its place, never quoted, instead of going out in every request's address.
@Test func aTokenFarLongerThanAnyTokenIsRefusedWithoutBeingQuoted() {
    let huge = String(repeating: "Q", count: 50_000)
    let yaml = """
        pipeline: notes
        source:
          cloudkit:
            container: iCloud.com.example.notes
            auth:
              apiToken: key
              webAuthToken: ${CLOUDKIT_WEB_AUTH_TOKEN}
        destination:
          url: embedded
        """
    let found = problems(yaml, environment: ["CLOUDKIT_WEB_AUTH_TOKEN": huge])
    #expect(
        found == [
            "notes.yml:7:21: source.cloudkit.auth.webAuthToken is 50000 bytes long, and a token is a few hundred (at most 8192): check what it is set from"
        ])
    #expect(!found.joined().contains("QQQQ"))
}

@Test func theDatabaseTokenStoreIsReadAndCannotBeNamedWithAFile() throws {
    let cloudKit = """
        pipeline: notes
        source:
          cloudkit:
            container: iCloud.com.example.notes
            auth:
              apiToken: t
              webAuthTokenStore: database

        """
    let pipeline = try parse(cloudKit + "destination:\n  url: embedded\n")
    let settings = try #require(pipeline.source as? CloudKitSettings)
    #expect(settings.auth.webAuthTokenStore == .database)
    #expect(settings.auth.webAuthTokenFile == nil, "no default file when the database keeps the tokens")
    #expect(
        problems(cloudKit.replacingOccurrences(of: "database\n", with: "database\n      webAuthTokenFile: t.txt\n") + "destination:\n  url: embedded\n") == [
            "notes.yml:8:7: webAuthTokenFile names a file, but webAuthTokenStore is database in source.cloudkit.auth: the tokens are kept in one place; remove one"
        ])
    #expect(
        problems(cloudKit.replacingOccurrences(of: "database\n", with: "databse\n") + "destination:\n  url: embedded\n") == [
            "notes.yml:7:26: unknown value 'databse' for webAuthTokenStore (expected file or database; did you mean 'database'?)"
        ])
}

// MARK: The public database

/// A public-database source: read by query, signed with a server-to-server key.
private func publicSource(auth: String, more: String = "") -> String {
    """
    pipeline: scores
    source:
      cloudkit:
        container: iCloud.com.example.scores
        database: public
    \(more)    auth:
    \(auth)
    destination:
      url: embedded
      types: [Score, Player]
    """
}

/// A new P-256 key in a file only its owner reads, as `zonefeed key create` writes one.
private func keyFile(_ pem: String? = nil) throws -> String {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("zonefeed-key-\(UUID().uuidString).pem").path
    let text = pem ?? P256.Signing.PrivateKey().pemRepresentation
    #expect(FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600]))
    return path
}

@Test func thePublicDatabaseTakesAServerKeyFromAFileOrAVariableAndReadsItsDefaultZone() throws {
    let path = try keyFile()
    defer { try? FileManager.default.removeItem(atPath: path) }
    let fromFile = try Pipeline.parse(
        yaml: publicSource(auth: "      serverKey:\n        keyID: ${CK_KEY_ID}\n        privateKeyFile: \(path)"), filePath: "scores.yml",
        components: components,
        environment: ["CK_KEY_ID": "key-id-SECRET"])
    let settings = try #require(fromFile.source as? CloudKitSettings)
    #expect(settings.database == .public)
    #expect(settings.zones == .named(["_defaultZone"]))
    #expect(settings.auth.serverKey?.keyID == "key-id-SECRET")
    #expect(settings.auth.webAuthTokenFile == nil, "no sign-in is kept for the public database")
    #expect(settings.queryLagSeconds == 300)
    #expect(settings.deletionSweep == .interval(seconds: 86_400))
    #expect(settings.needsRecordTypes != nil)

    let pem = P256.Signing.PrivateKey().pemRepresentation
    let fromVariable = try Pipeline.parse(
        yaml: publicSource(auth: "      serverKey:\n        keyID: key-id-in-the-file\n        privateKey: ${CK_PRIVATE_KEY}"), filePath: "scores.yml",
        components: components, environment: ["CK_PRIVATE_KEY": pem])
    let key = try #require((fromVariable.source as? CloudKitSettings)?.auth.serverKey)
    #expect(key.publicKeyPEM == (try P256.Signing.PrivateKey(pemRepresentation: pem)).publicKey.pemRepresentation)
    // The plan names the key by its fingerprint, never by itself or its ID.
    let plan = (fromVariable.source as! CloudKitSettings).plan(PlanContext(pipelineName: "scores", vaultLocation: nil))
    let text = plan.rows.map { "\($0.label): \($0.value)" }.joined(separator: "\n")
    #expect(text.contains(key.fingerprint))
    // (An ID too short to stand out, "k1", turned up by chance inside the base64 fingerprint.)
    #expect(!text.contains("key-id-in-the-file") && !text.contains("PRIVATE"), "\(text)")
    #expect(text.contains("500 requests per 100,000 records"), "\(text)")
}

@Test func aServerKeyThatDoesNotParseIsRefusedAtItsLine() throws {
    let path = try keyFile("-----BEGIN EC PRIVATE KEY-----\nnot a key\n-----END EC PRIVATE KEY-----\n")
    defer { try? FileManager.default.removeItem(atPath: path) }
    let found = problems(publicSource(auth: "      serverKey: { keyID: k1, privateKeyFile: \(path) }"))
    #expect(found.count == 1, "\(found)")
    #expect(
        found.first?.hasPrefix("notes.yml:7:47: source.cloudkit.auth.serverKey.privateKeyFile: the server-to-server private key is not a P-256 key") == true,
        "\(found)")
    #expect(found.first?.contains("not a key") == false, "the file's text is never quoted")
}

/// A key ID read from a variable set from a file keeps the file's last newline; a header cannot
/// carry it, so the file is refused at the key ID's line, without quoting the ID.
@Test func aKeyIDWithALinesEndIsRefusedAtItsLineAndNotQuoted() throws {
    let path = try keyFile()
    defer { try? FileManager.default.removeItem(atPath: path) }
    let found = problems(
        publicSource(auth: "      serverKey:\n        keyID: ${CK_KEY_ID}\n        privateKeyFile: \(path)"), environment: ["CK_KEY_ID": "key-id-SECRET\n"])
    #expect(found.count == 1, "\(found)")
    #expect(
        found.first?.hasPrefix(
            "notes.yml:8:16: source.cloudkit.auth.serverKey.keyID holds a control character (U+000A, a line's end: a secret made from a file keeps"
        ) == true, "\(found)")
    #expect(found.allSatisfy { !$0.contains("key-id-SECRET") }, "\(found)")
}

@Test func thePublicDatabaseRefusesASignInAndZonesAndBadSweepsEachAtItsLine() {
    let found = problems(
        publicSource(
            auth: "      apiToken: t\n      webAuthToken: w",
            more: "    zones: [Scores]\n    queryLag: 5 minutes\n    deletionSweep: every 0 runs\n"))
    #expect(
        found == [
            "notes.yml:6:5: the public database has one zone, _defaultZone, which zonefeed reads by query: remove source.cloudkit.zones",
            "notes.yml:7:15: source.cloudkit.queryLag must be a time such as 30s, 5m, 24h or 7d, not '5 minutes'",
            "notes.yml:8:20: source.cloudkit.deletionSweep must sweep every 1 to 100,000 runs, not 'every 0 runs'",
            "notes.yml:11:7: source.cloudkit.auth.webAuthToken: the public database is read without a user's sign-in (with serverKey, or the apiToken alone); remove it",
        ])
}

@Test func deletionSweepsAreATimeAnumberOfRunsOrNever() throws {
    func sweep(_ value: String) throws -> CloudKitSettings.DeletionSweep {
        let pipeline = try Pipeline.parse(
            yaml: publicSource(auth: "      apiToken: t", more: "    deletionSweep: \(value)\n"), filePath: "scores.yml", components: components,
            environment: [:])
        return try #require(pipeline.source as? CloudKitSettings).deletionSweep
    }
    #expect(try sweep("never") == .never)
    #expect(try sweep("12h") == .interval(seconds: 43_200))
    #expect(try sweep("{ every: 10 runs }") == .everyRuns(10))
    #expect(try sweep("every 3 runs") == .everyRuns(3))
    #expect(
        problems(publicSource(auth: "      apiToken: t", more: "    deletionSweep: 10s\n")) == [
            "notes.yml:6:20: source.cloudkit.deletionSweep must be between 1m and 365d, not '10s'"
        ])
}
