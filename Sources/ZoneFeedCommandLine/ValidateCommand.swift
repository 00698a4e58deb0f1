import ArgumentParser
import Foundation
import ZoneFeed

struct ValidateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "validate",
        abstract: "Check a pipeline file and print the plan and the DDL a run would execute; touches nothing.")

    @OptionGroup var options: PipelineOptions

    func run() async throws {
        let pipeline = try options.loadPipeline()
        printLine("\(InertText.escaped(options.pipelineFile)): valid")
        printLine("")
        printLine(PipelinePlan(pipeline).description)
        guard let setup = pipeline.destination.setup(pipelineName: pipeline.name) else { return }
        printLine("")
        printLine(InertText.escaped(setup.heading))
        // A statement's own lines stay lines; the names in them were refused at the file if
        // they held a control character, and are escaped here all the same.
        for statement in setup.statements {
            printLine(statement.split(separator: "\n", omittingEmptySubsequences: false).map { InertText.escaped($0) }.joined(separator: "\n"))
        }
    }
}
