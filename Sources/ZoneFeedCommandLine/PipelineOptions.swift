import ArgumentParser
import Foundation
import Logging
import ZoneFeed
import ZoneFeedComponents

/// What every command that reads a pipeline shares: the file, the logs, the destination and the
/// source, each of which its settings open or make.
struct PipelineOptions: ParsableArguments {
    @Argument(help: "The pipeline file (pipelines/NAME.yml).")
    var pipelineFile: String

    @Option(name: .customLong("log-format"), help: "text or json (one object a line).")
    var logFormat: ZoneFeedLogHandler.Format = .text

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical.", transform: Logger.Level.parse)
    var logLevel: Logger.Level = .info

    func makeLogger() -> Logger {
        let format = logFormat
        let level = logLevel
        return Logger(label: "zonefeed") { label in ZoneFeedLogHandler(label: label, format: format, logLevel: level) }
    }

    /// The logger of a command on one pipeline: every line names it.
    func makeLogger(for pipeline: Pipeline) -> Logger {
        var logger = makeLogger()
        logger[metadataKey: "pipeline"] = "\(pipeline.name)"
        return logger
    }

    /// The pipeline, or exit 2 with every problem as `file:line:column: message`.
    func loadPipeline() throws -> Pipeline {
        do {
            return try Pipeline.load(path: pipelineFile, components: ZoneFeedCommand.components)
        } catch let error as PipelineFileError {
            FileHandle.standardError.write(Data((error.description + "\n").utf8))
            throw Exit.usage
        }
    }

    /// Runs `body` with the pipeline's destination, which opens itself (starting the embedded
    /// server when the pipeline says `embedded`) and closes on every path; a destination that
    /// cannot be opened is logged as a sentence and exits 1.
    func withDestination<T>(_ pipeline: Pipeline, logger: Logger, _ body: (any OpenedDestination) async throws -> T) async throws -> T {
        do {
            return try await pipeline.destination.open(pipelineName: pipeline.name, logger: logger, body)
        } catch let error as DestinationUnavailableError {
            logger.error("\(error)")
            throw Exit.failed
        }
    }

    /// Runs `body` with the pipeline's destination for a command that only asks it something
    /// (`status`, `reset`): any failure is logged as a sentence and exits 1.
    func askingDestination<T>(_ pipeline: Pipeline, logger: Logger, _ body: (any OpenedDestination) async throws -> T) async throws -> T {
        try await withDestination(pipeline, logger: logger) { destination in
            do {
                return try await body(destination)
            } catch {
                logger.error("\(error)")
                throw Exit.failed
            }
        }
    }

    /// One run of `pipeline` from `source` into its destination: what `run` does once and
    /// `watch` does each cycle, built in this one place. The caller closes the run's destination.
    static func runner(
        for pipeline: Pipeline, source: any ChangeSource, destination: any OpenedDestination, zones: [String] = [], shard: ZoneShard? = nil,
        logger: Logger, events: @escaping SyncEventHandler
    ) -> (runner: Runner, destination: any RunDestination) {
        let runDestination = destination.runDestination(logger: logger)
        let configuration = Runner.Configuration(
            pipeline: pipeline.name, commitEvery: pipeline.destination.commitEvery, commitEveryBytes: pipeline.destination.commitEveryBytes,
            zoneFilter: zones,
            parallelZones: pipeline.destination.parallelZones, shard: shard)
        return (Runner(configuration: configuration, source: source, destination: runDestination, logger: logger, events: events), runDestination)
    }

    /// Runs `body` with the pipeline's source, which its settings make, shut down on every path.
    /// `destination` keeps the source's vault (the web auth tokens of
    /// `auth.webAuthTokenStore: database`), and closes it after the source's shutdown has saved
    /// to it. When the shutdown cannot save what the source keeps between runs, `unsaved` turns
    /// `body`'s result into one that says so; without it, the command fails (exit 1).
    func withSource<T>(
        _ pipeline: Pipeline, destination: any OpenedDestination, logger: Logger, unsaved: ((T, any Error) -> T)? = nil,
        _ body: (any ChangeSource) async throws -> T
    ) async throws -> T {
        let source: any ChangeSource
        do {
            source = try await pipeline.source.makeSource(
                SourceContext(pipelineName: pipeline.name, vault: destination.sourceVault, recordTypes: pipeline.destination.mappedRecordTypes), logger: logger)
        } catch {
            logger.error("\(error)")
            throw Exit.usage
        }
        do {
            let value = try await body(source)
            do {
                try await source.shutdown()
            } catch {
                // What the source keeps between runs is not saved: the next run may be refused.
                guard let unsaved else {
                    logger.error("\(error)")
                    throw Exit.failed
                }
                return unsaved(value, error)
            }
            return value
        } catch {
            try? await source.shutdown()
            throw error
        }
    }
}

extension ZoneFeedLogHandler.Format: ExpressibleByArgument {}

extension Logger.Level {
    /// `--log-level`: a transform rather than a conformance of swift-log's type to
    /// swift-argument-parser's protocol, which neither package owns here.
    static func parse(_ argument: String) throws -> Logger.Level {
        guard let level = Logger.Level(rawValue: argument) else {
            throw ValidationError("unknown log level '\(argument)' (expected trace, debug, info, notice, warning, error or critical)")
        }
        return level
    }
}
