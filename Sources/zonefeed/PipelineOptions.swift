import ArgumentParser
import EmbeddedPostgresServer
import Foundation
import Logging
import ZoneFeed
import ZoneFeedComponents
import ZoneFeedPostgres

/// What every command that reads a pipeline shares: the file, the logs, and the destination
/// (starting the embedded server when the pipeline says `embedded`).
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
            return try Pipeline.load(path: pipelineFile, components: .zonefeed)
        } catch let error as PipelineFileError {
            FileHandle.standardError.write(Data((error.description + "\n").utf8))
            throw Exit.usage
        }
    }

    /// Runs `body` with a libpq connection string for the pipeline's destination, which opens
    /// itself (starting the embedded server when it is `embedded`); a server that cannot be
    /// started is logged as a sentence and exits 1.
    func withDestination<T>(_ pipeline: Pipeline, logger: Logger, _ body: (String) async throws -> T) async throws -> T {
        do {
            return try await pipeline.postgres.withConninfo(logger: logger, body)
        } catch let error as EmbeddedPostgresError {
            logger.error("\(error)")
            throw Exit.failed
        }
    }

    /// Runs `body` with a PostgreSQL destination for the pipeline, closed on every path; a
    /// failure is logged as a sentence and exits 1.
    func withPostgresDestination<T: Sendable>(_ pipeline: Pipeline, logger: Logger, _ body: (PostgresDestination) async throws -> T) async throws -> T {
        try await withDestination(pipeline, logger: logger) { conninfo in
            let destination = PostgresDestination(pipelineName: pipeline.name, settings: pipeline.postgres, conninfo: conninfo, logger: logger)
            do {
                let value = try await body(destination)
                await destination.close()
                return value
            } catch {
                await destination.close()
                logger.error("\(error)")
                throw Exit.failed
            }
        }
    }

    /// One run of `pipeline` from `source` into its destination: what `run` does once and
    /// `watch` does each cycle, built in this one place. The caller closes the destination.
    static func runner(
        for pipeline: Pipeline, source: any ChangeSource, conninfo: String, zones: [String] = [], logger: Logger,
        events: @escaping SyncEventHandler
    ) -> (runner: Runner, destination: PostgresDestination) {
        let destination = PostgresDestination(pipelineName: pipeline.name, settings: pipeline.postgres, conninfo: conninfo, logger: logger)
        let configuration = Runner.Configuration(
            pipeline: pipeline.name, commitEvery: pipeline.destination.commitEvery, zoneFilter: zones,
            parallelZones: pipeline.destination.parallelZones)
        return (Runner(configuration: configuration, source: source, destination: destination, logger: logger, events: events), destination)
    }

    /// Runs `body` with the pipeline's source, which its settings make, shut down on every path.
    /// `conninfo` is the destination's, where it keeps the source's vault (the web auth tokens
    /// of `auth.webAuthTokenStore: database`).
    func withSource<T>(_ pipeline: Pipeline, conninfo: String, logger: Logger, _ body: (any ChangeSource) async throws -> T) async throws -> T {
        let vault = WebAuthTokenTable(pipelineName: pipeline.name, schema: pipeline.postgres.schema, conninfo: conninfo)
        let source: any ChangeSource
        do {
            source = try pipeline.source.makeSource(SourceContext(pipelineName: pipeline.name, vault: vault), logger: logger)
        } catch {
            logger.error("\(error)")
            throw Exit.usage
        }
        // The vault is closed after the source, whose shutdown saves the newest token.
        do {
            let value = try await body(source)
            do {
                try await source.shutdown()
            } catch {
                // What the source keeps between runs is not saved: the next run may be refused.
                vault.close()
                logger.error("\(error)")
                throw Exit.failed
            }
            vault.close()
            return value
        } catch {
            try? await source.shutdown()
            vault.close()
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
