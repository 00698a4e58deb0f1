import ArgumentParser
import Foundation
import ZoneFeed

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
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = ["psql", "--no-psqlrc", "-d", conninfo] + psqlArguments
            process.environment = ProcessInfo.processInfo.environment.merging(["PGOPTIONS": "-c search_path=\(pipeline.postgres.schema),public"]) { _, new in new }
            do {
                try process.run()
            } catch {
                logger.error("could not start psql (install the postgresql-client package): \(error)")
                return 1
            }
            process.waitUntilExit()
            return process.terminationStatus
        }
        if status != 0 { throw ExitCode(status) }
    }
}
