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
        print("\(options.pipelineFile): valid")
        print("")
        print(PipelinePlan(pipeline).description)
        print("")
        print("-- DDL a run executes (each statement is idempotent):")
        for statement in PostgresSchema(pipelineName: pipeline.name, settings: pipeline.postgres).ddl { print(statement + ";") }
    }
}
