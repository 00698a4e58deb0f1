import ArgumentParser
import Foundation
import ZoneFeed
import ZoneFeedComponents
import ZoneFeedPostgres

struct ValidateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "validate",
        abstract: "Check a pipeline file and print the plan and the DDL a run would execute; touches nothing.")

    @OptionGroup var options: PipelineOptions

    func run() async throws {
        let pipeline = try options.loadPipeline()
        print("\(InertText.escaped(options.pipelineFile)): valid")
        print("")
        print(PipelinePlan(pipeline).description)
        print("")
        print("-- DDL a run executes (each statement is idempotent):")
        // A statement's own lines stay lines; the names in them were refused at the file if
        // they held a control character, and are escaped here all the same.
        for statement in PostgresSchema(pipelineName: pipeline.name, settings: pipeline.postgres).ddl {
            print(statement.split(separator: "\n", omittingEmptySubsequences: false).map { InertText.escaped($0) }.joined(separator: "\n") + ";")
        }
    }
}
