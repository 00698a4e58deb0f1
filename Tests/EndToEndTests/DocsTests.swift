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

    /// A command the docs show: the subcommand (`run`, `schema mapping`) and the flags written
    /// with it; where it is shown, for the message.
    struct ShownCommand: Hashable {
        var subcommand: String
        var flags: [String]
        var place: String
    }

    /// Every `zonefeed …` command line in the README's and docs/'s code: in fenced blocks, a line
    /// that starts with it (after `$ `, `swift run ` or a path); inline, a code span that does.
    static func shownCommands() throws -> [ShownCommand] {
        let files =
            ["README.md"]
            + (try FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent("docs").path))
            .filter { $0.hasSuffix(".md") }.sorted().map { "docs/\($0)" }
        var commands: [ShownCommand] = []
        for file in files {
            let text = try String(contentsOf: root.appendingPathComponent(file), encoding: .utf8)
            var inBlock = false
            for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                if line.trimmingCharacters(in: .whitespaces).hasPrefix("```") {
                    inBlock.toggle()
                    continue
                }
                var candidates: [Substring] = []
                if inBlock {
                    if let match = line.firstMatch(of: /^\s*(?:\$ )?(?:swift run |\S*\/)?zonefeed (.*)$/) { candidates.append(match.1) }
                } else {
                    candidates += line.matches(of: /`zonefeed ([^`]*)`/).map { $0.1 }
                }
                for candidate in candidates {
                    let command = candidate.split(separator: "#", maxSplits: 1).first ?? ""
                    let words = command.split(separator: " ")
                    // `zonefeed demo: run 1 …` is output and `zonefeed …` a placeholder, not commands;
                    // `zonefeed --version` is the top level's.
                    guard let first = words.first.map(String.init), first.wholeMatch(of: /[a-z][a-z-]*|--[a-z-]+/) != nil else { continue }
                    let subcommand =
                        first.hasPrefix("-") ? "" : ["schema", "config"].contains(first) && words.count > 1 ? "\(first) \(words[1])" : first
                    let flags = command.matches(of: /--[a-z][a-z0-9-]*/).map { String($0.0) }
                    commands.append(ShownCommand(subcommand: subcommand, flags: flags, place: "\(file):\(number + 1)"))
                }
            }
        }
        return commands
    }

    /// Every command the README and docs/ show exists, with every flag shown beside it (its
    /// `--help` names it): a renamed flag or command cannot linger in the docs.
    @Test func everyCommandTheDocsShowExistsWithItsFlags() async throws {
        let shown = try Self.shownCommands()
        #expect(Set(shown.map(\.subcommand)).isSuperset(of: ["run", "watch", "status", "login", "reset", "validate", "psql", "fake-server", "bench"]))
        let zonefeed = try ZonefeedBinary()
        defer { zonefeed.remove() }
        var help: [String: ZonefeedBinary.Output] = [:]
        for subcommand in Set(shown.map(\.subcommand)).sorted() {
            help[subcommand] = try await zonefeed.run(subcommand.split(separator: " ").map(String.init) + ["--help"])  // "": the top level
        }
        for command in shown {
            let output = try #require(help[command.subcommand])
            // An unknown subcommand with --help prints the top level's help, and exits 0.
            #expect(
                output.status == 0 && output.stdout.contains("USAGE: zonefeed \(command.subcommand.isEmpty ? "<subcommand>" : command.subcommand)"),
                "\(command.place): zonefeed \(command.subcommand) is not a command: \(output.stdout.prefix(200)) \(output.stderr)")
            for flag in command.flags where flag != "--help" {
                #expect(output.stdout.contains(flag), "\(command.place): zonefeed \(command.subcommand) has no \(flag)")
            }
        }
        print("DocsTests: \(shown.count) commands shown in the docs, \(help.count) subcommands, \(Set(shown.flatMap(\.flags)).count) flags checked")
    }
}
