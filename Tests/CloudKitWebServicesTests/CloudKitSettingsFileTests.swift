import FakeCloudKit
import Foundation
import Logging
import Testing
import ZoneFeed
import ZoneFeedCloudKit

// The `source.cloudkit` section, as ZoneFeedCloudKit reads it. Each YAML literal starts at line
// 1, column 1, so the expected `notes.yml:line:column` can be read off the literal itself.

/// A destination that reads only its `url`: what a file needs besides its source.
private struct PlainDestination: DestinationConfiguration {
    static let reference = PipelineReference(
        component: "plain", keys: [.section("destination", "Nothing."), PipelineKey("destination.url", takes: "text", "Nothing.")])
    static let topLevelKeys: [String] = []
    static func read(_ top: PipelineSection, pipelineName: String?, from file: PipelineFileReader) -> PlainDestination? {
        file.subsection("destination", in: top, allowed: reference.keys.keys(in: "destination"), required: true) == nil ? nil : PlainDestination()
    }
    static let key = "url"
    var commitEvery = 1
    var parallelZones = 1

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
              serverKeyID: abc123
              serverPrivateKeyFile: keys/eckey.pem
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
    #expect(cloudKit.auth.apiToken == nil)
    #expect(cloudKit.auth.serverKeyID == "abc123")
    #expect(cloudKit.auth.serverPrivateKeyFile == "keys/eckey.pem")
}

@Test func resultsLimitOutOfRangeIsRefused() {
    let yaml = cloudKitWithToken.replacingOccurrences(of: "    auth:", with: "    resultsLimit: 500\n    auth:")
    #expect(
        problems(yaml, environment: ["CLOUDKIT_API_TOKEN": "t"]) == [
            "notes.yml:5:19: source.cloudkit.resultsLimit must be a whole number from 1 to 200, not '500'"
        ]
    )
}

@Test func publicDatabaseIsRefusedBecauseItHasNoChangeFeeds() {
    let yaml = cloudKitWithToken.replacingOccurrences(of: "    auth:", with: "    database: public\n    auth:")
    #expect(
        problems(yaml, environment: ["CLOUDKIT_API_TOKEN": "t"]) == [
            "notes.yml:5:15: the public database has no change feeds: zone change feeds exist only in the private and shared databases (expected private or shared)"
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
            "notes.yml:5:5: missing required key 'apiToken' in source.cloudkit.auth (or sign requests server-to-server with serverKeyID and serverPrivateKeyFile)"
        ]
    )
    let halfKey = none.replacingOccurrences(of: "webAuthTokenFile: token", with: "serverKeyID: abc")
    #expect(
        problems(halfKey) == [
            "notes.yml:6:7: serverKeyID needs serverPrivateKeyFile in source.cloudkit.auth: the PEM file of the key it names"
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
            "notes.yml:7:21: source.cloudkit.auth.webAuthToken is 50000 bytes long, and a token is a few hundred (at most 16384): check what it is set from"
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
