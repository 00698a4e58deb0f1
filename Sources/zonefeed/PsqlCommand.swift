import ArgumentParser
import Foundation
import Subprocess
import ZoneFeed
import ZoneFeedComponents

struct PsqlCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "psql",
        abstract: "Open psql on the pipeline's database (starting the embedded server if the pipeline uses it).",
        discussion: "Arguments after the pipeline file go to psql, e.g. zonefeed psql pipelines/demo.yml -c 'SELECT 1'.")

    @OptionGroup var options: PipelineOptions

    @Argument(parsing: .captureForPassthrough, help: "Arguments for psql.")
    var psqlArguments: [String] = []

    func run() async throws {
        let pipeline = try options.loadPipeline()
        let logger = options.makeLogger()
        let status = try await options.withDestination(pipeline, logger: logger) { conninfo -> Int32 in
            // Ctrl-C belongs to psql (it cancels the query at hand); zonefeed waits for psql
            // rather than dying under it and leaving an embedded server running.
            let previous = signal(SIGINT, SIG_IGN)
            defer { signal(SIGINT, previous) }
            do {
                let result = try await Subprocess.run(
                    .name("psql"), arguments: Arguments(["--no-psqlrc", "-d", conninfo] + psqlArguments),
                    environment: .inherit.updating(["PGOPTIONS": "-c search_path=\(pipeline.postgres.schema),public"]),
                    input: .currentStandardInput, output: .currentStandardOutput, error: .currentStandardError)
                switch result.terminationStatus {
                case .exited(let code): return code
                case .signaled(let signal): return 128 + signal
                }
            } catch {
                logger.error("could not start psql (install the postgresql-client package): \(error)")
                return 1
            }
        }
        if status != 0 { throw ExitCode(status) }
    }
}
