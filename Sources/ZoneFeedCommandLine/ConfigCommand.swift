import ArgumentParser
import ZoneFeed
import ZoneFeedComponents

/// `zonefeed config …`: what a pipeline file may hold.
struct ConfigCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "config",
        abstract: "Describe the pipeline file.",
        subcommands: [ReferenceCommand.self])

    struct ReferenceCommand: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "reference",
            abstract: "Print every key a pipeline file may hold: what it takes, its default and what it does, by the component that reads it.",
            discussion: """
                Markdown, from the components themselves: each reader refuses a key its table does \
                not list. docs/pipeline-file.md holds the same text, and a test keeps them equal.
                """)

        func run() {
            print(PipelineReference.markdown(ZoneFeedCommand.components.reference), terminator: "")
        }
    }
}
