import ArgumentParser
import Foundation
import ZoneFeed
import ZoneFeedComponents

/// `zonefeed`: the program's `main` runs it with the program's components; a test may run its
/// commands in-process with components of its own (`components`) and read what they print
/// (`output`).
public struct ZoneFeedCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "zonefeed",
        abstract: "Export CloudKit record-zone change feeds into PostgreSQL.",
        discussion: """
            Exit codes: 0 success (including nothing to do); 1 the run failed; 2 usage or \
            pipeline-file error; 3 authentication needs a person; 130/143 interrupted.
            """,
        version: BuildInfo.versionText,
        subcommands: [
            RunCommand.self, WatchCommand.self, StatusCommand.self, ResetCommand.self, ValidateCommand.self, LoginCommand.self, SchemaCommand.self,
            ConfigCommand.self, KeyCommand.self,
            PsqlCommand.self, FakeServerCommand.self, BenchCommand.self,
        ]
    )

    /// What pipeline files may name.
    @TaskLocal public static var components: PipelineComponents = .zonefeed

    /// Where a command writes what it prints for the person, a line (or lines) at a time:
    /// stdout, or a test's buffer.
    @TaskLocal public static var output: @Sendable (String) -> Void = { print($0) }

    public init() {}

    /// Runs the command `arguments` name (the program's name left out) and returns its exit
    /// code; what ArgumentParser refuses is said on stderr. ArgumentParser's own usage errors
    /// exit 64; zonefeed's contract says 2.
    public static func run(arguments: [String]) async -> Int32 {
        do {
            var command = try parseAsRoot(arguments)
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
            return 0
        } catch let code as ExitCode {
            return code.rawValue
        } catch {
            let code = exitCode(for: error)
            let message = fullMessage(for: error)
            if code == .success {
                if !message.isEmpty { printLine(message) }
                return 0
            }
            if !message.isEmpty { FileHandle.standardError.write(Data((message + "\n").utf8)) }
            return code == .validationFailure ? 2 : code.rawValue
        }
    }
}

enum Exit {
    static let failed = ExitCode(1)
    static let usage = ExitCode(2)
    static let authentication = ExitCode(3)
}

/// A line of what a command prints for the person, through `ZoneFeedCommand.output`.
func printLine(_ text: String) {
    ZoneFeedCommand.output(text)
}
