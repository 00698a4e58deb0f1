import CloudKitSchema
import FakeCloudKit
import Foundation
import TestSupport
import Testing
import ZoneFeed
import ZoneFeedCloudKit
import ZoneFeedComponents
import ZoneFeedPostgres

// Issue 22: bad input from a pipeline file never crashes, hangs or floods. Every number has a
// range and is refused outside it at its line; a quoted value is short and escaped; a file of
// problems lists fifty of them; a connection string's problems quote none of it.

// `problems` and `parse` are PipelineFileTests'.

/// A CloudKit pipeline with one more line in `source.cloudkit` (line 6, its value at column 5 +
/// the key and ": ").
private func cloudKit(_ line: String) -> String {
    """
    pipeline: notes
    source:
      cloudkit:
        container: iCloud.com.example.notes
        auth: { apiToken: t }
        \(line)
    destination:
      url: embedded

    """
}

/// A fake pipeline with one more line in `source.fake` (line 4), `destination` (line 7) or a
/// `watch:` section (line 10).
private func fake(source: String = "seed: 1", destination: String = "deletes: hard", watch: String = "listen: 127.0.0.1:0") -> String {
    """
    pipeline: notes
    source:
      fake:
        \(source)
    destination:
      url: embedded
      \(destination)
    watch:
      pollInterval: 300
      \(watch)

    """
}

// MARK: - Numbers

/// Each number a pipeline file holds, with the line it sits on, the highest value it takes and
/// one past it, and the sentence that refuses the one past.
struct NumberCase: Sendable, CustomTestStringConvertible {
    var yaml: @Sendable (String) -> String
    var key: String
    var highest: String
    var refused: [(value: String, message: String)]
    var position: String
    var testDescription: String { key }
}

let numberCases: [NumberCase] = [
    NumberCase(
        yaml: { cloudKit("timeoutSeconds: \($0)") }, key: "source.cloudkit.timeoutSeconds", highest: "3600",
        refused: [
            ("1e300", "must be a number of seconds from 0.001 to 3,600, not '1e300'"),
            ("0", "must be a number of seconds from 0.001 to 3,600, not '0'"),
            (".nan", "must be a number of seconds from 0.001 to 3,600, not '.nan'"),
            ("inf", "must be a number of seconds from 0.001 to 3,600, not 'inf'"),
        ], position: "6:21"),
    NumberCase(
        yaml: { cloudKit("retryBudgetSeconds: \($0)") }, key: "source.cloudkit.retryBudgetSeconds", highest: "86400",
        refused: [("1e300", "must be a number of seconds from 0 to 86,400, not '1e300'"), ("-1", "must be a number of seconds from 0 to 86,400, not '-1'")],
        position: "6:25"),
    NumberCase(
        yaml: { cloudKit("maxAttempts: \($0)") }, key: "source.cloudkit.maxAttempts", highest: "100",
        refused: [
            ("9223372036854775807", "must be a whole number from 1 to 100, not '9223372036854775807'"),
            ("101", "must be a whole number from 1 to 100, not '101'"),
        ], position: "6:18"),
    NumberCase(
        yaml: { cloudKit("resultsLimit: \($0)") }, key: "source.cloudkit.resultsLimit", highest: "200",
        refused: [("201", "must be a whole number from 1 to 200, not '201'")], position: "6:19"),
    NumberCase(
        yaml: { cloudKit("maxConcurrentRequests: \($0)") }, key: "source.cloudkit.maxConcurrentRequests", highest: "256",
        refused: [("257", "must be a whole number from 1 to 256, not '257'")], position: "6:28"),
    NumberCase(
        yaml: { fake(source: "zones: \($0)") }, key: "source.fake.zones", highest: "1000",
        refused: [("1001", "must be a whole number from 1 to 1,000, not '1001'")], position: "4:12"),
    NumberCase(
        yaml: { fake(source: "recordsPerZone: \($0)") }, key: "source.fake.recordsPerZone", highest: "100_000_000",
        refused: [("9223372036854775807", "must be a whole number from 0 to 100,000,000, not '9223372036854775807'")], position: "4:21"),
    NumberCase(
        yaml: { fake(source: "pageSize: \($0)") }, key: "source.fake.pageSize", highest: "200",
        refused: [("201", "must be a whole number from 1 to 200, not '201'")], position: "4:15"),
    NumberCase(
        yaml: { fake(source: "badRecordEvery: \($0)") }, key: "source.fake.badRecordEvery", highest: "100000000",
        refused: [("1e9", "must be a whole number from 1 to 100,000,000, not '1e9'")], position: "4:21"),
    NumberCase(
        yaml: { fake(source: "fieldSets: \($0)") }, key: "source.fake.fieldSets", highest: "4096",
        refused: [("4097", "must be a whole number from 1 to 4,096, not '4097'"), ("0", "must be a whole number from 1 to 4,096, not '0'")],
        position: "4:16"),
    NumberCase(
        yaml: { fake(destination: "commitEvery: \($0)") }, key: "destination.commitEvery", highest: "1000000",
        refused: [("9223372036854775807", "must be a whole number from 1 to 1,000,000, not '9223372036854775807'")], position: "7:16"),
    NumberCase(
        yaml: { fake(destination: "commitEveryBytes: \($0)") }, key: "destination.commitEveryBytes", highest: "1073741824",
        refused: [
            ("1048575", "must be a whole number from 1,048,576 to 1,073,741,824, not '1048575'"),
            ("2147483648", "must be a whole number from 1,048,576 to 1,073,741,824, not '2147483648'"),
        ], position: "7:21"),
    NumberCase(
        yaml: { fake(destination: "parallelZones: \($0)") }, key: "destination.parallelZones", highest: "16",
        refused: [("17", "must be a whole number from 1 to 16, not '17'")], position: "7:18"),
    NumberCase(
        yaml: { fake(watch: "unhealthyAfter: \($0)") }, key: "watch.unhealthyAfter", highest: "604800",
        refused: [("1e300", "must be a number of seconds from 1 to 604,800, not '1e300'")], position: "10:19"),
]

@Test(arguments: numberCases)
func everyNumberInAPipelineFileHasARangeAndIsRefusedOutsideItAtItsLine(_ number: NumberCase) throws {
    #expect(problems(number.yaml(number.highest)) == [], "the highest value of \(number.key) is taken")
    for (value, message) in number.refused {
        #expect(problems(number.yaml(value)) == ["notes.yml:\(number.position): \(number.key) \(message)"])
    }
}

@Test func thePollIntervalIsBoundedToADay() {
    let yaml = fake().replacingOccurrences(of: "pollInterval: 300", with: "pollInterval: 1e300")
    #expect(problems(yaml) == ["notes.yml:9:17: watch.pollInterval must be a number of seconds from 1 to 86,400, not '1e300'"])
}

/// What `zonefeed run` trapped on (`Int64(1e300 * 1000)`): the highest values a file may hold
/// become the client's configuration, and a value no file may hold converts without a trap.
@Test func theHighestSecondsAFileMayHoldBecomeTheClientsConfiguration() throws {
    let pipeline = try parse(cloudKit("timeoutSeconds: 3600\n    retryBudgetSeconds: 86400\n    maxAttempts: 100"))
    let settings = try #require(pipeline.source as? CloudKitSettings)
    let configuration = try CloudKitSource.clientConfiguration(for: settings)
    #expect(configuration.timeout == .seconds(3600))
    #expect(configuration.retry.budget == .seconds(86400))
    #expect(configuration.retry.maxAttempts == 100)

    #expect(Duration(clampingSeconds: 1e300) == .seconds(1_000_000_000_000_000))
    #expect(Duration(clampingSeconds: -.infinity) == .seconds(-1_000_000_000_000_000))
    #expect(Duration(clampingSeconds: .nan) == .zero)
    #expect(Duration(clampingSeconds: 2.5) == .milliseconds(2500))
}

// MARK: - Quoted values, and how many problems are listed

@Test func aHugeValueIsQuotedShortWithItsLength() throws {
    let huge = String(repeating: "x", count: 10_000_000)
    let found = problems(fake(destination: "schema: ${HUGE}"), environment: ["HUGE": huge])
    #expect(found.count == 1)
    let line = try #require(found.first)
    #expect(line.utf8.count < 300, "\(line.prefix(300))")
    #expect(
        line
            == "notes.yml:7:11: schema '\(String(repeating: "x", count: 80))…' (10,000,000 characters) is 10,000,000 bytes long: PostgreSQL names are at most 63 bytes"
    )
}

@Test func aQuotedValueHasItsControlCharactersEscaped() {
    let yaml = cloudKit("zones: \"Notes\\e[2J\\e]0;pwned\\a\\nnotes.yml:1:1: forged\"")
    let found = problems(yaml)
    #expect(
        found == [
            #"notes.yml:6:12: source.cloudkit.zones must be 'all' or a list of zone names such as [Notes, Archive], not 'Notes\u{1b}[2J\u{1b}]0;pwned\u{7}\u{a}notes.yml:1:1: forged' (did you mean [Notes\u{1b}[2J\u{1b}]0;pwned\u{7}\u{a}notes.yml:1:1: forged]?)"#
        ])
    #expect(!found.joined().unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) })
}

@Test func aNameWithAControlCharacterIsRefusedAsATableName() {
    let yaml = fake() + "recordTypes:\n  Note:\n    table: \"notes\\u009b2J\"\n"
    #expect(problems(yaml) == [#"notes.yml:13:12: table name 'notes\u{9b}2J' of record type Note holds a control character (U+009B)"#])
}

@Test func fiftyProblemsAreListedAndTheRestCounted() throws {
    let yaml = fake() + (1...2_000).map { "unknown\($0): 1\n" }.joined()
    let error = try #require(throws: PipelineFileError.self) { try parse(yaml) }
    #expect(error.diagnostics.count == 2_000)
    let lines = error.description.split(separator: "\n")
    #expect(lines.count == 51)
    #expect(lines.first?.hasPrefix("notes.yml:11:1: unknown key 'unknown1' at the top level") == true, "\(lines.first ?? "")")
    #expect(lines.last == "… and 1,950 more problems")
}

@Test func manyDuplicatedKeysAreNamedFiveAtATime() throws {
    let yaml = fake() + (1...20).map { "dup\($0): 1\ndup\($0): 2\n" }.joined()
    let found = problems(yaml)
    #expect(found == ["notes.yml:11:1: keys 'dup1', 'dup10', 'dup11', 'dup12', 'dup13' and 15 more appear more than once in the same mapping"])
}

// MARK: - Files read up to a cap

@Test func aPipelineFileIsReadUpToOneMebibyte() throws {
    var error: PipelineFileError?
    let elapsed = threadCPUTime {
        error = #expect(throws: PipelineFileError.self) { try Pipeline.load(path: "/dev/zero", components: .zonefeed, environment: [:]) }
    }
    #expect(
        error?.description
            == "/dev/zero:0:0: cannot read pipeline file: it is larger than 1 MiB, the most a pipeline file may be (one is a few kilobytes): check that this is the pipeline file"
    )
    #expect(elapsed < .seconds(5), "the capped read stays cheap: \(elapsed) of CPU")
}

@Test func aSchemaFileIsReadUpToSixteenMebibytes() throws {
    let error = try #require(throws: SchemaFileError.self) { try CloudKitSchema(contentsOfFile: "/dev/zero") }
    #expect(
        error.description
            == "/dev/zero: cannot read the schema file: it is larger than 16 MiB, the most a schema file may be: check that this is the .ckdb file")
    let named = problems(fake() + "recordTypes:\n  schemaFile: /dev/zero\n")
    #expect(
        named == [
            "notes.yml:12:15: recordTypes.schemaFile: cannot read /dev/zero: it is larger than 16 MiB, the most a schema file may be: check that this is the .ckdb file"
        ])
}

// MARK: - Anchors and aliases

/// Nine levels of ten aliases each (a billion laughs), 400 bytes: composing it hashed the alias
/// key's whole unfolded tree, 10^9 scalars, and never ended.
// The time asserted is the thread's CPU (a full test run on 2 cores can leave a thread a few
// percent of one); the wall limit only ends a hang.
@Test(.timeLimit(.minutes(10))) func aFileOfNestedAliasesIsRefusedAtItsFirstAnchorBeforeAnyIsUnfolded() {
    let yaml = """
        a: &a [x,x,x,x,x,x,x,x,x,x]
        b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]
        c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]
        d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]
        e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]
        f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]
        g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]
        h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g,*g]
        i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h,*h]
        ? *i
        : 1
        """
    var found: [String] = []
    let elapsed = threadCPUTime { found = problems(yaml) }
    #expect(
        found == [
            "notes.yml:1:4: YAML anchors and aliases (&name, *name) are not taken in a pipeline file; write the value out where it is used"
        ])
    #expect(elapsed < .seconds(1), "refused before composing: \(elapsed) of CPU")
}

/// A megabyte of `[` (or of `{`), which the file's size lets through: libyaml's scanner walks
/// every open bracket for each token it reads, so 100,000 of them took 22 s and a megabyte tens
/// of minutes, in every command that reads the file. Refused at the first past 64.
@Test(.timeLimit(.minutes(10)), arguments: ["[", "{a: ", "]["])
func bracketsNestedPastWhatAnySettingNeedsAreRefusedAtOnce(_ opening: String) {
    // "][": closing brackets first, half the file, then opening ones: libyaml closes nothing
    // with none open, and so must the count.
    let closing = opening == "][" ? String(repeating: "]", count: 1 << 19) : ""
    let yaml = "recordTypes: " + closing + String(repeating: opening == "][" ? "[" : opening, count: (1 << 19 - 20) / opening.utf8.count)
    var found: [String] = []
    let elapsed = threadCPUTime { found = problems(yaml) }
    let column = 14 + closing.utf8.count + 64 * (opening == "][" ? 1 : opening.utf8.count)
    #expect(found == ["notes.yml:1:\(column): the pipeline file nests [ ] and { } more than 64 deep; no setting needs a tenth of that"])
    #expect(elapsed < .seconds(1), "refused before it is read through: \(elapsed) of CPU")
}

// MARK: - Connection strings

/// Written the many ways a password is written, right or wrong: whatever the problem, the
/// sentence holds no piece of the password.
@Test(arguments: [
    "host=/tmp dbname=x password=correct XYZZY-horse-battery",
    "host=/tmp dbname=x password = correct XYZZY-horse-battery",
    "host=/tmp password=correct XYZZY-horse-battery=1 dbname=x",
    "host=/tmp password=correct XYZZY-horse-battery='x dbname=x",
    "host=/tmp password='correct XYZZY-horse-battery dbname=x",
    "host=/tmp dbname=x password=correct XYZZY-horse-battery sslmode=disable",
    "postgresql://app:correct%20XYZZY-horse-battery@/x?host=/tmp&%zz=1",
    "postgresql:///x?host=/tmp&password=correct XYZZY-horse-battery&bad",
    "postgres://app:correct:XYZZY-horse-battery@[::1/x",
])
func aConnectionStringsProblemQuotesNoPieceOfIt(url: String) {
    let found = problems(fake(destination: "schema: notes").replacingOccurrences(of: "url: embedded", with: "url: ${URL}"), environment: ["URL": url])
    #expect(!found.isEmpty, "\(url) is refused")
    for piece in ["correct", "XYZZY", "horse", "battery"] {
        #expect(!found.joined().contains(piece), "\(found)")
    }
    #expect(!redactConnectionString(url).contains("XYZZY"), "\(redactConnectionString(url))")
}

@Test func aWordAfterAnUnquotedPasswordIsCountedNotQuoted() {
    let yaml = fake().replacingOccurrences(of: "url: embedded", with: "url: \"host=/tmp dbname=x password=correct XYZZY-horse-battery\"")
    #expect(
        problems(yaml) == [
            "notes.yml:6:8: destination.url is not a valid key=value connection string: its 4th word is not followed by '=' (a value with a space must be single-quoted, as in password='two words')"
        ])
}
