import ArgumentParser
import Foundation
import LibPQ

@main
struct ZoneFeedCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "zonefeed",
        abstract: "Export CloudKit record-zone change feeds into PostgreSQL.",
        discussion: """
            Exit codes: 0 success (including nothing to do); 1 the run failed; 2 usage or \
            pipeline-file error; 3 authentication needs a person; 130/143 interrupted.
            """,
        version: BuildInfo.versionText,
        subcommands: [
            RunCommand.self, WatchCommand.self, StatusCommand.self, ResetCommand.self, ValidateCommand.self, LoginCommand.self, SchemaCommand.self,
            ConfigCommand.self,
            PsqlCommand.self, FakeServerCommand.self, BenchCommand.self,
        ]
    )

    /// ArgumentParser's own usage errors exit 64; zonefeed's contract says 2.
    static func main() async {
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch let code as ExitCode {
            Foundation.exit(code.rawValue)
        } catch {
            let code = exitCode(for: error)
            let message = fullMessage(for: error)
            if code == .success {
                if !message.isEmpty { print(message) }
                Foundation.exit(0)
            }
            if !message.isEmpty { FileHandle.standardError.write(Data((message + "\n").utf8)) }
            Foundation.exit(code == .validationFailure ? 2 : code.rawValue)
        }
    }
}

enum Exit {
    static let failed = ExitCode(1)
    static let usage = ExitCode(2)
    static let authentication = ExitCode(3)
}
