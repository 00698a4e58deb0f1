import FakeCloudKit
import Testing
import ZoneFeed
import ZoneFeedPostgres

// The destination's part of a pipeline file, as PostgreSQL reads it: `destination`, the record
// types, tables and columns, and the record policies. Each YAML literal starts at line 1,
// column 1, so the expected `notes.yml:line:column` can be read off the literal itself.

/// What a file is read with here: the fake source and the PostgreSQL destination.
private let components = PipelineComponents(sources: [FakeSettings.self], destinations: [PostgresSettings.self])

/// The diagnostics a file is refused with, as printed; empty when the file is accepted.
private func problems(_ yaml: String) -> [String] {
    do {
        _ = try Pipeline.parse(yaml: yaml, filePath: "notes.yml", components: components, environment: [:])
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

/// A valid file to start from; the tests below add or change a few lines.
private let fakeHeader = """
    pipeline: notes
    source:
      fake: {}
    destination:
      url: embedded

    """

@Test func schemaEvolutionDefaultsToEvolveForAutoAndFreezeForAWrittenOutMapping() throws {
    let auto = try parse(fakeHeader + "recordTypes: auto\n").postgresSettings()
    #expect(auto.autoRecordTypes && auto.policies.schemaEvolution == .evolve && auto.recordTypes.isEmpty)
    let written = try parse(fakeHeader + "recordTypes:\n  Note: { table: notes }\n").postgresSettings()
    #expect(!written.autoRecordTypes && written.policies.schemaEvolution == .freeze)
    let evolving = try parse(fakeHeader + "recordTypes:\n  Note: { table: notes }\nschemaEvolution: evolve\n").postgresSettings()
    #expect(evolving.policies.schemaEvolution == .evolve && evolving.recordTypes.map(\.table) == ["notes"])
    #expect(
        problems(fakeHeader + "recordTypes: auto\nschemaEvolution: freeze\n") == [
            "notes.yml:7:18: recordTypes: auto makes a table for each record type as it appears, which schemaEvolution: freeze forbids: remove schemaEvolution, or map the record types"
        ])
    #expect(
        problems(fakeHeader + "recordTypes: automatic\n") == [
            "notes.yml:6:14: recordTypes must be auto, a mapping of record type names to tables, or { schemaFile: ... }, not 'automatic'"
        ])
    #expect(
        problems(fakeHeader + "recordTypes: auto\nschemaEvolution: grow\n") == [
            "notes.yml:7:18: unknown value 'grow' for schemaEvolution (expected evolve or freeze)"
        ])
}

// MARK: - Record types, tables and columns

@Test func unknownColumnTypeIsRefusedWithASuggestion() {
    let yaml =
        fakeHeader + """
            recordTypes:
              Note:
                fields:
                  wordCount: bigin
                  body: { column: body_text, type: txt }
                  cover: picture
            """
    #expect(
        problems(yaml) == [
            "notes.yml:9:18: unknown type 'bigin' for field wordCount (did you mean 'bigint'?)",
            "notes.yml:10:40: unknown type 'txt' for field body (did you mean 'text'?)",
            "notes.yml:11:14: unknown type 'picture' for field cover (expected one of text, bigint, double precision, timestamptz, bytea, jsonb, boolean, text[], bigint[], double precision[], timestamptz[], bytea[])",
        ]
    )
}

@Test func fieldMappingWithoutATypeIsMissingItsType() {
    let yaml =
        fakeHeader + """
            recordTypes:
              Note:
                fields:
                  body: { column: body_text }
            """
    #expect(problems(yaml) == ["notes.yml:9:7: missing required key 'type' in recordTypes.Note.fields.body"])
}

@Test func columnUsedTwiceInATableNamesBothFields() {
    let yaml =
        fakeHeader + """
            recordTypes:
              Note:
                fields:
                  wordCount: bigint
                  words: { column: word_count, type: bigint }
            """
    #expect(
        problems(yaml) == [
            "notes.yml:10:24: column 'word_count' of field words is already used by field wordCount in table note"
        ]
    )
}

@Test func columnClashingWithASystemColumnIsRefused() {
    let yaml =
        fakeHeader + """
            recordTypes:
              Note:
                fields:
                  createdAt: timestamptz
                  data: { column: fields, type: jsonb }
            """
    #expect(
        problems(yaml) == [
            "notes.yml:9:7: column 'created_at' of field createdAt clashes with the system column created_at that every record table has: map the field to another column with { column: ..., type: ... }",
            "notes.yml:10:23: column 'fields' of field data clashes with the system column fields that every record table has: map the field to another column with { column: ..., type: ... }",
        ]
    )
}

@Test func tableUsedByTwoRecordTypesIsRefused() {
    let yaml =
        fakeHeader + """
            recordTypes:
              Note:
                table: notes
              Memo:
                table: notes
            """
    #expect(problems(yaml) == ["notes.yml:10:12: table 'notes' of record type Memo is already used by record type Note"])
}

@Test func tablesReservedForMetadataAndViewsAreRefused() {
    let yaml =
        fakeHeader + """
            recordTypes:
              Run:
                table: zonefeed_runs
              Note:
                table: notes_live
            """
    #expect(
        problems(yaml) == [
            "notes.yml:8:12: table 'zonefeed_runs' of record type Run starts with 'zonefeed_', which is reserved for zonefeed's own tables",
            "notes.yml:10:12: table 'notes_live' of record type Note ends with '_live', which is reserved for the views of live rows",
        ]
    )
}

@Test func identifiersThatPostgreSQLWouldTruncateAreRefused() {
    let long = String(repeating: "a", count: 60)
    let yaml =
        fakeHeader + """
            recordTypes:
              Note:
                table: \(long)
                fields:
                  title: { column: "\(long)abcd", type: text }
            """
    #expect(
        problems(yaml) == [
            "notes.yml:8:12: table '\(long)' of record type Note is 60 bytes long: at most 58 bytes, so that its view \(long)_live stays within PostgreSQL's 63",
            "notes.yml:10:24: column '\(long)abcd' of field title is 64 bytes long: PostgreSQL names are at most 63 bytes",
        ]
    )
}

@Test func parallelZonesIsReadAndBounded() throws {
    let yaml = """
        pipeline: notes
        source:
          fake: { zones: 4 }
        destination:
          url: embedded
          parallelZones: 3
        """
    #expect(try parse(yaml).destination.parallelZones == 3)
    #expect(
        problems(yaml.replacingOccurrences(of: "parallelZones: 3", with: "parallelZones: 0")) == [
            "notes.yml:6:18: destination.parallelZones must be a whole number from 1 to 16, not '0'"
        ]
    )
}

// MARK: - Destination and policies

@Test func unknownEnumValueSuggestsTheClosestOne() {
    let yaml = fakeHeader.replacingOccurrences(of: "url: embedded", with: "url: embedded\n  deletes: tombstones")
    #expect(
        problems(yaml) == [
            "notes.yml:6:12: unknown value 'tombstones' for deletes (expected tombstone or hard; did you mean 'tombstone'?)"
        ]
    )
}

@Test func wrongKindOfValueSaysWhatWasExpected() {
    let yaml =
        fakeHeader.replacingOccurrences(of: "url: embedded", with: "url: embedded\n  commitEvery: abc")
        + "unmappedFields: [keep]\n"
    #expect(
        problems(yaml) == [
            "notes.yml:6:16: destination.commitEvery must be a whole number from 1 to 1,000,000, not 'abc'",
            "notes.yml:7:17: unmappedFields must be keep or drop, not a list",
        ]
    )
}

@Test func destinationUrlMustBeSomethingLibpqAccepts() {
    let yaml = fakeHeader.replacingOccurrences(of: "url: embedded", with: "url: embeded")
    #expect(
        problems(yaml) == [
            "notes.yml:5:8: destination.url must be 'embedded', a postgresql:// URI or a key=value connection string such as 'host=localhost dbname=app' (did you mean 'embedded'?)"
        ]
    )
}

@Test func connectionStringsAreCheckedByLibpqWithoutQuotingThem() {
    func urlProblems(_ url: String) -> [String] {
        problems(fakeHeader.replacingOccurrences(of: "url: embedded", with: "url: \"\(url)\""))
    }
    #expect(
        urlProblems("host=db dbnmae=app password=s3cret") == [
            "notes.yml:5:8: destination.url is not a valid key=value connection string: the key of its 2nd pair is not a libpq parameter (did you mean 'dbname'?); keys that are not libpq's are not shown, as they may be part of a password"
        ]
    )
    let uri = urlProblems("postgresql://app:s3cret@db/app?%zz=1")
    #expect(
        uri == [
            "notes.yml:5:8: destination.url is not a connection URI libpq can parse: check its host, port, percent-encoding and parameters"
        ]
    )
    #expect(!uri.joined().contains("s3cret"))
    #expect(urlProblems("postgresql://app:s3cret@db:5432/app?sslmode=require").isEmpty)
    #expect(urlProblems("host=db dbname=app password='se cret'").isEmpty)
    // libpq ends the password at the first '@' and takes the rest for the host, which its
    // errors print: refused before anything connects.
    let atSign = urlProblems("postgresql://app:Tr0ub@dor@db/app")
    #expect(
        atSign == [
            "notes.yml:5:8: destination.url has more than one '@' before its host: percent-encode an '@' in the user name or password as %40"
        ])
    #expect(!atSign.joined().contains("dor"))
    #expect(urlProblems("postgresql://app:Tr0ub%40dor@db/app").isEmpty)
    #expect(urlProblems("postgresql://app@db/app?options=a@b").isEmpty, "an '@' after the host is not the password's")
}

// MARK: - redactConnectionString

@Test(arguments: [
    ("embedded", "embedded"),
    ("postgresql://app@db/app", "postgresql://app@db/app"),
    ("postgresql://app:s3cret@db:5432/app", "postgresql://app:<redacted>@db:5432/app"),
    ("postgres://app:p@ss@db/app?sslmode=require", "postgres://app:<redacted>@db/app?sslmode=require"),
    ("postgresql://db/app?user=app&password=s3cret&sslmode=require", "postgresql://db/app?user=app&password=<redacted>&sslmode=require"),
    ("postgresql://app:a?b@db/app", "postgresql://app:<redacted>@db/app"),
    ("host=db dbname=app", "host=db dbname=app"),
    ("host=db password=s3cret dbname=app", "host=db password=<redacted> dbname=app"),
    ("host=db password = 'se cret \\' x' dbname=app", "host=db password = <redacted> dbname=app"),
    ("host=db sslpassword=k3y", "host=db sslpassword=<redacted>"),
    ("dbname='postgresql://app:s3cret@db/app'", "dbname='postgresql://app:<redacted>@db/app'"),
    ("host=db password='unterminated", "host=db <redacted>"),
    // A combining mark after the ':' or the '@' (a password may begin with one) makes one
    // Character of the two; the URI is read by its scalars, as libpq reads its bytes.
    ("postgresql://app:\u{301}s3cret@db/app", "postgresql://app:<redacted>@db/app"),
    ("postgresql://app:s3cret@\u{301}db/app", "postgresql://app:<redacted>@\u{301}db/app"),
    ("postgresql://db/app?password=\u{301}s3cret&sslmode=require", "postgresql://db/app?password=<redacted>&sslmode=require"),
    // A backslash after a prepended mark (U+0600) is one Character with it: read by Characters,
    // the escaped quote ended the password early and `user=x'`, its rest, was printed.
    ("password='ab\u{600}\\' user=x' host=db", "password=<redacted> host=db"),
    ("host=db password=s3\u{600}\\ cret dbname=app", "host=db password=<redacted> dbname=app"),
    ("password='s3cret' \u{301}host=db", "password=<redacted> <redacted>"),
])
func redactConnectionStringHidesPasswords(input: String, expected: String) {
    #expect(Array(redactConnectionString(input).utf8) == Array(expected.utf8), "\(redactConnectionString(input).debugDescription)")
}

@Test func destinationSettingsAreRead() throws {
    let settings = try parse(
        fakeHeader.replacingOccurrences(
            of: "url: embedded", with: "url: host=/tmp dbname=app\n  schema: notes_v2\n  deletes: hard\n  commitEvery: 1_000")
    ).postgresSettings()
    #expect(settings.schema == "notes_v2")
    #expect(settings.deletes == .hard)
    #expect(settings.commitEvery == 1000)
}
