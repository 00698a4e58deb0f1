import CloudKitSchema
import FakeCloudKit
import Foundation
import Testing
import ZoneFeed
import ZoneFeedCloudKit
import ZoneFeedComponents
import ZoneFeedPostgres

// Issue 22: bad input from a pipeline file never crashes, hangs or floods. Every number has a
// range and is refused outside it at its line; a quoted value is short and escaped; a file of
// problems lists fifty of them; a connection string's problems quote none of it.

private func problems(_ yaml: String, environment: [String: String] = [:]) -> [String] {
    do {
        _ = try Pipeline.parse(yaml: yaml, filePath: "notes.yml", components: .zonefeed, environment: environment)
        return []
    } catch let error as PipelineFileError {
        return error.diagnostics.map(\.description)
    } catch {
        return ["unexpected \(type(of: error)): \(error)"]
    }
}

private func parse(_ yaml: String, environment: [String: String] = [:]) throws -> Pipeline {
    try Pipeline.parse(yaml: yaml, filePath: "notes.yml", components: .zonefeed, environment: environment)
}

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
