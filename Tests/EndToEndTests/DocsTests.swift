import Foundation
import TestSupport
import Testing

/// What the docs say of the pipeline file is what the program reads.
@Suite struct DocsTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let begin = "<!-- zonefeed config reference: begin -->\n"
    static let end = "<!-- zonefeed config reference: end -->"

    /// docs/pipeline-file.md's "Every key" holds exactly what `zonefeed config reference` prints.
    @Test func theDocsListEveryKeyAsTheComponentsDo() async throws {
        let zonefeed = try ZonefeedBinary()
        defer { zonefeed.remove() }
        let printed = try await zonefeed.run(["config", "reference"])
        #expect(printed.status == 0, "\(printed.stderr)")
        #expect(printed.stdout.contains("| `source.cloudkit.resultsLimit` | a whole number from 1 to 200 | 200 |"), "\(printed.stdout)")
        #expect(printed.stdout.contains("| `destination.commitEvery` | a whole number from 1 to 1,000,000 | 5,000 |"))

        let docs = try String(contentsOf: Self.root.appendingPathComponent("docs/pipeline-file.md"), encoding: .utf8)
        let start = try #require(docs.range(of: Self.begin), "docs/pipeline-file.md has the begin marker")
        let stop = try #require(docs.range(of: Self.end, range: start.upperBound..<docs.endIndex), "and the end marker after it")
        let documented = String(docs[start.upperBound..<stop.lowerBound])
        let differing = zip(
            documented.split(separator: "\n", omittingEmptySubsequences: false), printed.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        )
        .first { $0 != $1 }
        #expect(
            documented == printed.stdout,
            "docs/pipeline-file.md differs from `zonefeed config reference` (paste its output between the markers); first differing line: \(differing.map { "\($0.0) ≠ \($0.1)" } ?? "one is longer")"
        )
    }
}
