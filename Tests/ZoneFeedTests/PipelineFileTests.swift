import FakeCloudKit
import Foundation
import TestSupport
import Testing
import ZoneFeed
import ZoneFeedCloudKit
import ZoneFeedComponents
import ZoneFeedMetrics
import ZoneFeedPostgres

// Each YAML literal below starts at line 1, column 1, so the expected `notes.yml:line:column`
// can be read off the literal itself.

/// The diagnostics a file is refused with, as printed; empty when the file is accepted.
func problems(_ yaml: String, environment: [String: String] = [:]) -> [String] {
    do {
        _ = try Pipeline.parse(yaml: yaml, filePath: "notes.yml", components: .zonefeed, environment: environment)
        return []
    } catch let error as PipelineFileError {
        return error.diagnostics.map(\.description)
    } catch {
        return ["unexpected \(type(of: error)): \(error)"]
    }
}

func parse(_ yaml: String, environment: [String: String] = [:]) throws -> Pipeline {
    try Pipeline.parse(yaml: yaml, filePath: "notes.yml", components: .zonefeed, environment: environment)
}

/// A valid file to start from; the tests below add or change a few lines.
private let fakeHeader = """
    pipeline: notes
    source:
      fake: {}
    destination:
      url: embedded

    """

// MARK: - Valid files

@Test func productExampleParsesIntoItsSettings() throws {
    let pipeline = try parse(PipelineExamples.product, environment: PipelineExamples.productEnvironment)

    #expect(pipeline.name == "notes")
    #expect(pipeline.filePath == "notes.yml")
    guard let cloudKit = pipeline.source as? CloudKitSettings else {
        Issue.record("expected a CloudKit source, got \(pipeline.source)")
        return
    }
    #expect(cloudKit.baseURL == "https://api.apple-cloudkit.com")
    #expect(cloudKit.container == "iCloud.com.example.notes")
    #expect(cloudKit.environment == .production)
    #expect(cloudKit.database == .private)
    #expect(cloudKit.zones == .all)
    #expect(cloudKit.resultsLimit == 200)
    #expect(cloudKit.desiredKeys == nil)
    #expect(cloudKit.auth.apiToken == Secret("ck-api-token-SECRET-1"))
    #expect(cloudKit.auth.webAuthToken == Secret("ck-web-auth-SECRET-2"))
    #expect(cloudKit.auth.webAuthTokenFile == ".zonefeed/notes.web-auth-token")
    #expect(cloudKit.auth.serverKey == nil)

    #expect(try pipeline.postgresSettings().url.value == PipelineExamples.productEnvironment["DATABASE_URL"])
    #expect(try pipeline.postgresSettings().schema == "notes")
    #expect(try pipeline.postgresSettings().deletes == .tombstone)
    #expect(try pipeline.postgresSettings().commitEvery == 5000)

    #expect(try pipeline.postgresSettings().recordTypes.map(\.recordType) == ["Note", "Folder"])
    #expect(try pipeline.postgresSettings().recordTypes.map(\.table) == ["notes", "folders"])
    #expect(
        try pipeline.postgresSettings().mapping(forRecordType: "Note")?.fields == [
            PostgresFieldMapping(field: "title", column: "title", type: .text),
            PostgresFieldMapping(field: "wordCount", column: "word_count", type: .bigint),
            PostgresFieldMapping(field: "body", column: "body_text", type: .text),
        ]
    )
    #expect(try pipeline.postgresSettings().mapping(forRecordType: "Folder")?.fields == [])
    #expect(try pipeline.postgresSettings().policies.unmappedFields == .keep)
    #expect(try pipeline.postgresSettings().policies.unknownRecordTypes == .skip)
    #expect(try pipeline.postgresSettings().policies.onBadRecord == .reject)
}

@Test func fakeSourceTakesItsSettingsAndTheRestDefaults() throws {
    let pipeline = try parse(
        """
        pipeline: demo
        source:
          fake: { seed: 7, zones: 2, recordsPerZone: 500, pageSize: 50, badRecordEvery: 97, owner: _alice, churn: false }
        destination:
          url: embedded
        recordTypes:
          Note:
            fields:
              createdOn: timestamptz
              tags: { type: "text[]" }
              score: float8
        unmappedFields: drop
        unknownRecordTypes: reject
        onBadRecord: fail
        """
    )
    guard let fake = pipeline.source as? FakeSettings else {
        Issue.record("expected the fake source, got \(pipeline.source)")
        return
    }
    var expected = FakeSettings(seed: 7, zones: 2, recordsPerZone: 500, pageSize: 50, badRecordEvery: 97, churn: false)
    expected.owner = "_alice"
    #expect(fake == expected)
    #expect(try pipeline.postgresSettings().isEmbedded)
    #expect(try pipeline.postgresSettings().schema == "demo")  // the pipeline's name by default
    #expect(try pipeline.postgresSettings().deletes == .tombstone)
    #expect(try pipeline.postgresSettings().commitEvery == 5_000)
    #expect(try pipeline.postgresSettings().commitEveryBytes == 16 * 1024 * 1024)
    #expect(try pipeline.postgresSettings().parallelZones == 2)
    #expect(try pipeline.postgresSettings().recordTypes.map(\.table) == ["note"])  // the record type in snake_case by default
    #expect(
        try pipeline.postgresSettings().recordTypes.first?.fields == [
            PostgresFieldMapping(field: "createdOn", column: "created_on", type: .timestamptz),
            PostgresFieldMapping(field: "tags", column: "tags", type: .textArray),
            PostgresFieldMapping(field: "score", column: "score", type: .doublePrecision),
        ]
    )
    #expect(try pipeline.postgresSettings().policies.unmappedFields == .drop)
    #expect(try pipeline.postgresSettings().policies.unknownRecordTypes == .reject)
    #expect(try pipeline.postgresSettings().policies.onBadRecord == .fail)
}

@Test func emptyFakeMappingAndNoRecordTypesAreAValidFile() throws {
    let pipeline = try parse(fakeHeader)
    guard let fake = pipeline.source as? FakeSettings else {
        Issue.record("expected the fake source")
        return
    }
    #expect(fake == FakeSettings())
    #expect(try pipeline.postgresSettings().recordTypes.isEmpty)
    #expect(try parse(fakeHeader + "recordTypes: {}\n").postgresSettings().recordTypes.isEmpty)
}

@Test func loadReadsTheFileAndNamesItInDiagnostics() throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("zonefeed-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let good = directory.appendingPathComponent("good.yml").path
    let bad = directory.appendingPathComponent("bad.yml").path
    try fakeHeader.write(toFile: good, atomically: true, encoding: .utf8)
    try (fakeHeader + "onBadRecord: ignore\n").write(toFile: bad, atomically: true, encoding: .utf8)

    let pipeline = try Pipeline.load(path: good, components: .zonefeed, environment: [:])
    #expect(pipeline.name == "notes")
    #expect(pipeline.filePath == good)

    #expect {
        try Pipeline.load(path: bad, components: .zonefeed, environment: [:])
    } throws: { error in
        (error as? PipelineFileError)?.description
            == "\(bad):6:14: unknown value 'ignore' for onBadRecord (expected reject or fail)"
    }
}

@Test func unreadableFileIsAPipelineFileErrorWithTheReason() {
    #expect {
        try Pipeline.load(path: "/nonexistent/pipelines/notes.yml", components: .zonefeed, environment: [:])
    } throws: { error in
        (error as? PipelineFileError)?.description
            == "/nonexistent/pipelines/notes.yml:0:0: cannot read pipeline file: No such file or directory"
    }
}

// MARK: - Unknown and missing keys

@Test func unknownKeyIsRefusedWithItsLineAndASuggestion() {
    let yaml =
        fakeHeader + """
            recordTypes:
              Note:
                tabel: notes
            """
    #expect(problems(yaml) == ["notes.yml:8:5: unknown key 'tabel' in recordTypes.Note (did you mean 'table'?)"])
}

@Test func unknownKeyDiffersOnlyInCaseIsSuggestedItsSpelling() {
    let yaml = """
        pipeline: notes
        source:
          cloudKit: {}
        destination:
          url: embedded
        """
    #expect(
        problems(yaml) == [
            "notes.yml:2:1: source needs one of 'cloudkit' or 'fake'",
            "notes.yml:3:3: unknown key 'cloudKit' in source (did you mean 'cloudkit'?)",
        ]
    )
}

@Test func unknownKeyWithNothingCloseListsTheAllowedKeys() {
    #expect(
        problems(fakeHeader + "colour: blue\n") == [
            "notes.yml:6:1: unknown key 'colour' at the top level (expected pipeline, source, destination, recordTypes, schemaEvolution, unmappedFields, unknownRecordTypes, onBadRecord, metrics or watch)"
        ]
    )
}

@Test func missingRequiredKeyIsReportedAtTheKeyOfItsMapping() {
    let yaml = """
        pipeline: notes
        source:
          cloudkit:
            auth:
              apiToken: t
        destination:
          url: embedded
        """
    #expect(problems(yaml) == ["notes.yml:3:3: missing required key 'container' in source.cloudkit"])
}

@Test func missingTopLevelKeysAreReportedTogether() {
    #expect(
        problems("pipeline: notes\n") == [
            "notes.yml:1:1: missing required key 'source' at the top level",
            "notes.yml:1:1: missing required key 'destination' at the top level",
        ]
    )
}

@Test func emptyFileIsRefused() {
    #expect(
        problems("# nothing yet\n") == [
            "notes.yml:1:1: the pipeline file is empty: it needs at least 'pipeline', 'source' and 'destination'"
        ]
    )
}

// MARK: - ${VAR} substitution

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

@Test func unsetVariableIsReportedAtItsDollarBrace() {
    #expect(
        problems(cloudKitWithToken) == [
            "notes.yml:6:17: environment variable CLOUDKIT_API_TOKEN is not set (needed by source.cloudkit.auth.apiToken)"
        ]
    )
}

@Test func unsetVariableInsideAValuePointsAtItsOwnColumn() {
    let plain = """
        pipeline: notes
        source:
          fake: {}
        destination:
          url: postgresql://app:${DB_PASSWORD}@db/app
        """
    #expect(
        problems(plain) == ["notes.yml:5:25: environment variable DB_PASSWORD is not set (needed by destination.url)"]
    )
    let quoted = plain.replacingOccurrences(of: "url: postgresql://app:${DB_PASSWORD}@db/app", with: "url: \"postgresql://app:${DB_PASSWORD}@db/app\"")
    #expect(
        problems(quoted) == ["notes.yml:5:26: environment variable DB_PASSWORD is not set (needed by destination.url)"]
    )
}

/// A password with a `${` in it, written in the file without `$$`: the diagnostic points at it
/// and quotes none of it, whether what the braces hold cannot be a variable's name or could be
/// one not in the customary upper case.
@Test(arguments: ["Pa${ss-w0rd}", "Pa${ssw0rd}"])
func aPasswordWithADollarBraceIsPointedAtNotQuoted(password: String) {
    let yaml = """
        pipeline: notes
        source:
          fake: {}
        destination:
          url: postgresql://app:\(password)@db/app
        """
    let found = problems(yaml)
    #expect(found.count == 1 && found[0].hasPrefix("notes.yml:5:27: "), "\(found)")
    #expect(found.allSatisfy { !$0.contains("ss-w0rd") && !$0.contains("ssw0rd") }, "\(found)")
    #expect(found.allSatisfy { $0.contains("'$$'") }, "says how to write a literal '$': \(found)")
}

@Test func tenThousandUnsetVariablesInAValueAreEachPointedAtWithoutReadingTheLineAgainForEach() {
    let yaml = "pipeline: notes\nsource:\n  fake: {}\ndestination:\n  url: \"" + String(repeating: "${DB_PASSWORD}", count: 10_000) + "\"\n"
    var found: [String] = []
    let elapsed = threadCPUTime { found = problems(yaml) }
    // 0.3 s of CPU; 40 s when the value was found on its line once a variable.
    #expect(elapsed < .seconds(10), "finding the value on its line once, not once a variable: \(elapsed)")
    #expect(found.count == 10_000)
    #expect(found.last == "notes.yml:5:\(9 + 14 * 9_999): environment variable DB_PASSWORD is not set (needed by destination.url)")
}

@Test func variableDefaultIsUsedWhenTheVariableIsUnsetOrEmpty() throws {
    let yaml = """
        pipeline: notes
        source:
          cloudkit:
            container: ${CONTAINER:-iCloud.com.example.notes}
            environment: ${CK_ENV:-production}
            auth:
              apiToken: ${CLOUDKIT_API_TOKEN}
              webAuthTokenFile: ${STATE_DIR:-.zonefeed}/notes.token
        destination:
          url: embedded
        """
    let pipeline = try parse(yaml, environment: ["CLOUDKIT_API_TOKEN": "t", "CK_ENV": "development", "STATE_DIR": ""])
    guard let cloudKit = pipeline.source as? CloudKitSettings else {
        Issue.record("expected a CloudKit source")
        return
    }
    #expect(cloudKit.container == "iCloud.com.example.notes")
    #expect(cloudKit.environment == .development)
    #expect(cloudKit.auth.webAuthTokenFile == ".zonefeed/notes.token")
}

@Test func doubleDollarIsALiteralDollar() throws {
    let yaml =
        fakeHeader + """
            recordTypes:
              Note:
                table: price$$list
            """
    #expect(try parse(yaml).postgresSettings().recordTypes.first?.table == "price$list")
}

@Test func unterminatedVariableIsRefused() {
    let yaml = cloudKitWithToken.replacingOccurrences(of: "${CLOUDKIT_API_TOKEN}", with: "${CLOUDKIT_API_TOKEN")
    #expect(
        problems(yaml, environment: ["CLOUDKIT_API_TOKEN": "t"]) == [
            "notes.yml:6:17: unterminated '${' in source.cloudkit.auth.apiToken: close it with '}', or write '$$' for a literal '$'"
        ]
    )
}

// MARK: - Sources

@Test func bothSourcesAreRefused() {
    let yaml = """
        pipeline: notes
        source:
          cloudkit:
            container: iCloud.com.example.notes
            auth: { apiToken: t }
          fake: {}
        destination:
          url: embedded
        """
    #expect(problems(yaml) == ["notes.yml:6:3: source has both 'cloudkit' and 'fake': a pipeline reads from exactly one source"])
}

@Test func neitherSourceIsRefused() {
    let yaml = """
        pipeline: notes
        source: {}
        destination:
          url: embedded
        """
    #expect(problems(yaml) == ["notes.yml:2:1: source needs one of 'cloudkit' or 'fake'"])
}

@Test func fakeSettingsOutOfRangeAreRefused() {
    let yaml = """
        pipeline: notes
        source:
          fake: { seed: -1, zones: 0, pageSize: 500, churn: yes }
        destination:
          url: embedded
        """
    #expect(
        problems(yaml) == [
            "notes.yml:3:17: source.fake.seed must be a whole number from 0 to 18446744073709551615, not '-1'",
            "notes.yml:3:28: source.fake.zones must be a whole number from 1 to 1,000, not '0'",
            "notes.yml:3:41: source.fake.pageSize must be a whole number from 1 to 200, not '500'",
            "notes.yml:3:53: source.fake.churn must be true or false, not 'yes'",
        ]
    )
}

@Test func pipelineNameMayHoldOnlyLettersDigitsAndPunctuation() {
    let yaml = fakeHeader.replacingOccurrences(of: "pipeline: notes", with: "pipeline: my notes")
    #expect(
        problems(yaml) == ["notes.yml:1:11: pipeline name 'my notes' may hold only ASCII letters, digits, '_', '-' and '.'"]
    )
}

@Test func aPipelineNameTooLongToKeyItsCheckpointsIsRefusedWithItsPlace() {
    // A schema of its own: the one a pipeline names by default takes at most 63 bytes.
    let header = fakeHeader.replacingOccurrences(of: "url: embedded", with: "url: embedded\n  schema: notes")
    let yaml = header.replacingOccurrences(of: "pipeline: notes", with: "pipeline: " + String(repeating: "n", count: 201))
    #expect(
        problems(yaml) == [
            "notes.yml:1:11: pipeline name '\(String(repeating: "n", count: 80))…' (201 characters) is 201 bytes long; a pipeline name is at most 200 "
                + "(with a zone's names it keys the zone's checkpoint, in an index whose entries hold 2,704 bytes)"
        ]
    )
    let longest = header.replacingOccurrences(of: "pipeline: notes", with: "pipeline: " + String(repeating: "n", count: 200))
    #expect(problems(longest) == [])
}

// MARK: - YAML itself

@Test func yamlSyntaxErrorCarriesItsPosition() {
    let yaml = """
        pipeline: notes
        source:
          fake: {}
        destination:
          url: embedded
           schema: notes
        """
    #expect(problems(yaml) == ["notes.yml:6:10: invalid YAML: mapping values are not allowed in this context"])
}

@Test func duplicateKeyIsRefused() {
    #expect(
        problems(fakeHeader + "pipeline: other\n") == [
            "notes.yml:1:1: key 'pipeline' appears more than once in the same mapping"
        ]
    )
}

/// Keys that YAML tells apart only by their tags (a custom tag, or `On` plain, a boolean, and
/// `"On"` quoted, a string) name one setting: refused, where the second replaced the first.
@Test func keysThatDifferOnlyInTheirYAMLTagsAreOneKey() {
    #expect(problems(fakeHeader + "!x pipeline: other\n") == ["notes.yml:6:1: key 'pipeline' appears more than once in the same mapping"])
    let types = fakeHeader + "recordTypes:\n  On:\n    table: switches\n  \"On\":\n    table: switches_v2\n"
    #expect(problems(types) == ["notes.yml:9:3: key 'On' appears more than once in the same mapping"])
}

@Test func anAliasUsedAsAPlainValueIsRefusedAtItsAnchor() {
    let yaml = """
        pipeline: notes
        source:
          fake: &settings { seed: 1 }
        destination:
          url: embedded
        watch: *settings
        """
    #expect(
        problems(yaml) == [
            "notes.yml:3:9: YAML anchors and aliases (&name, *name) are not taken in a pipeline file; write the value out where it is used"
        ])
    // An alias whose anchor is missing is refused the same way, where the alias is.
    #expect(
        problems(fakeHeader + "unmappedFields: *keep\n") == [
            "notes.yml:6:17: YAML anchors and aliases (&name, *name) are not taken in a pipeline file; write the value out where it is used"
        ])
}

@Test func anAmpersandOrAsteriskInsideAValueIsNoAnchorOrAlias() throws {
    let yaml = """
        pipeline: notes
        source:
          cloudkit:
            container: iCloud.com.example.notes
            auth:
              apiToken: "a&b*c"
              webAuthToken: '*draft*'
        destination:
          url: postgresql://app:p&ss*word@db/notes # &not *an alias
          schema: notes
        """
    let pipeline = try parse(yaml)
    let cloudKit = try #require(pipeline.source as? CloudKitSettings)
    #expect(cloudKit.auth.apiToken == Secret("a&b*c"))
    #expect(cloudKit.auth.webAuthToken == Secret("*draft*"))
    #expect(try pipeline.postgresSettings().url.value == "postgresql://app:p&ss*word@db/notes")
}

// MARK: - All problems at once, and no secrets

@Test func severalProblemsAreReportedTogetherInFileOrder() throws {
    let yaml = """
        pipeline: notes
        source:
          cloudkit:
            container: iCloud.com.example.notes
            resultsLimit: 0
            auth:
              apiToken: ${CLOUDKIT_API_TOKEN}
        destination:
          url: embedded
          deletes: soft
        recordTypes:
          Note:
            fields:
              title: txet
        onBadRecords: fail
        """
    let expected = [
        "notes.yml:5:19: source.cloudkit.resultsLimit must be a whole number from 1 to 200, not '0'",
        "notes.yml:7:17: environment variable CLOUDKIT_API_TOKEN is not set (needed by source.cloudkit.auth.apiToken)",
        "notes.yml:10:12: unknown value 'soft' for deletes (expected tombstone or hard)",
        "notes.yml:14:14: unknown type 'txet' for field title (did you mean 'text'?)",
        "notes.yml:15:1: unknown key 'onBadRecords' at the top level (did you mean 'onBadRecord'?)",
    ]
    #expect(problems(yaml) == expected)
    let error = try #require(throws: PipelineFileError.self) { try parse(yaml) }
    #expect(error.description == expected.joined(separator: "\n"))
}

@Test func secretsNeverAppearInDiagnostics() {
    let secrets = ["api-SECRET", "web-SECRET", "pg-SECRET"]
    let yaml = """
        pipeline: notes
        source:
          cloudkit:
            container: iCloud.com.example.notes
            resultsLimit: lots
            auth:
              apiToken: ${API}
              webAuthToken: ${WEB}
        destination:
          url: ${PG}
          commitEvery: never
        """
    let environment = ["API": "api-SECRET", "WEB": "web-SECRET", "PG": "pg-SECRET"]
    let found = problems(yaml, environment: environment)
    #expect(
        found.contains(
            "notes.yml:10:8: destination.url must be 'embedded', a postgresql:// URI or a key=value connection string such as 'host=localhost dbname=app'"))
    for secret in secrets {
        #expect(!found.joined().contains(secret))
    }

    let badConninfo = fakeHeader.replacingOccurrences(of: "url: embedded", with: "url: \"host=db password='pg-SECRET\"")
    let conninfoProblems = problems(badConninfo)
    #expect(conninfoProblems == ["notes.yml:5:8: destination.url is not a valid key=value connection string: the quoted value of 'password' is not closed"])
}

// MARK: - Metrics and the token store

@Test func metricsSectionIsReadAndABadPushgatewayIsRefusedWhereItIs() throws {
    let pipeline = try parse(fakeHeader + "metrics:\n  file: /var/lib/node_exporter/zonefeed.prom\n  pushgateway: http://pushgateway:9091\n")
    #expect(pipeline.section(MetricsSettings.self) == MetricsSettings(file: "/var/lib/node_exporter/zonefeed.prom", pushgateway: "http://pushgateway:9091"))
    #expect(try parse(fakeHeader).section(MetricsSettings.self) == nil)
    #expect(
        problems(fakeHeader + "metrics:\n  pushgateway: pushgateway:9091\n  fiel: x.prom\n") == [
            "notes.yml:7:16: metrics.pushgateway must be an http:// or https:// URL such as http://pushgateway:9091",
            "notes.yml:8:3: unknown key 'fiel' in metrics (did you mean 'file'?)",
        ])
}
