import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle
import ZoneFeed
import ZoneFeedMetrics

struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Fetch what changed since the stored tokens and apply it; print a summary.")

    @OptionGroup var options: PipelineOptions

    @Option(name: .customLong("zone"), help: "Only this zone (repeatable).")
    var zones: [String] = []

    @Option(
        help: ArgumentHelp(
            "Only the zones of share INDEX of COUNT (INDEX from 0), split by a hash of each zone's owner and name: the pods of a Kubernetes Indexed Job pass $(JOB_COMPLETION_INDEX)/COUNT (docs/scale-out.md).",
            valueName: "INDEX/COUNT"))
    var shard: ZoneShard?

    @Option(help: "Progress on stderr: auto (on a terminal), always or never.")
    var progress: ProgressMode = .auto

    enum ProgressMode: String, ExpressibleByArgument, CaseIterable { case auto, always, never }

    @Option(
        name: .customLong("metrics-file"),
        help: "Write the run's metrics here at its end, in Prometheus' text format, for node_exporter's textfile collector (overrides metrics.file).")
    var metricsFile: String?

    @Option(help: "Push the run's metrics to this Pushgateway at its end, as job=\"zonefeed\", pipeline=\"<name>\" (overrides metrics.pushgateway).")
    var pushgateway: String?

    @Option(
        name: .customLong("metrics-instance"),
        help: "Push the run's metrics with this instance label too, so that processes sharing a pipeline keep a group each (overrides metrics.instance).")
    var metricsInstance: String?

    func run() async throws {
        // Trapped from the start: a signal before the run can stop gracefully exits at once.
        let signals = await ShutdownSignals()
        defer { signals.end() }
        let pipeline = try options.loadPipeline()
        let logger = options.makeLogger(for: pipeline)
        let metrics = try metricsExport(for: pipeline)

        var summary: RunSummary?
        var failure: RunError?
        var exitCode: Int32 = 0
        do {
            let (ran, failed, signal) = try await execute(pipeline, signals: signals, logger: logger, metrics: metrics)
            summary = ran
            failure = failed
            exitCode = failed.map { Self.exitCode(of: $0, signal: signal) } ?? 0
        } catch let exit as ExitCode {
            // The run never started: the destination could not be reached or the source refused.
            exitCode = exit.rawValue
        }
        Terminal.shared.endProgress()
        if let summary { printLine(Self.summaryText(summary, pipeline: pipeline, pipelineFile: options.pipelineFile)) }
        if let metrics {
            // A run that failed before it had a row in zonefeed_runs (the database could not be
            // reached; its connection is opened as the run starts) never started: refused, as
            // watch says it, not failed with run id 0. A run whose rows are committed but that
            // failed after (its newest token not saved) failed: no success is said.
            let status: RunStatus? =
                if let failure {
                    failure.kind == .interrupted ? .interrupted : summary == nil ? nil : .failed
                } else {
                    summary?.status
                }
            metrics.run.finish(status: exitCode == 0 ? .succeeded : status, exitCode: exitCode, runID: summary?.runID, seconds: summary?.seconds)
            await metrics.export(logger: logger)
        }
        if let failure {
            switch failure.kind {
            case .interrupted: logger.warning("run interrupted; the next run resumes from the last committed page")
            case .authentication:
                logger.error(
                    "\(LoginCommand.signInNeeded(pipelineFile: options.pipelineFile, message: failure.message, signsIn: pipeline.source.signsIn))")
            case .usage: logger.error("\(failure.message)")
            default: logger.error("run failed: \(failure.message)")
            }
        }
        if exitCode != 0 { throw ExitCode(exitCode) }
    }

    /// The exit code of a run that ended with `failure` (README, "Exit codes").
    static func exitCode(of failure: RunError, signal: Int32?) -> Int32 {
        switch failure.kind {
        case .interrupted: return signal ?? 130
        // Another account behind the credentials than the checkpoints': only a person can
        // sign in as the pipeline's own, or name a new pipeline, so not retried as exit 1 is.
        case .authentication, .accountChanged: return Exit.authentication.rawValue
        case .usage: return Exit.usage.rawValue
        default: return Exit.failed.rawValue
        }
    }

    /// The metrics of this run when the pipeline file or the command line asks for them; the
    /// command line's options win over the file's `metrics:` section.
    func metricsExport(for pipeline: Pipeline) throws -> MetricsExport? {
        var settings = pipeline.section(MetricsSettings.self) ?? MetricsSettings()
        if let metricsFile { settings.file = metricsFile }
        if let metricsInstance {
            guard !metricsInstance.isEmpty else {
                FileHandle.standardError.write(Data("zonefeed: --metrics-instance is empty: give this process's name, such as shard-0\n".utf8))
                throw Exit.usage
            }
            settings.instance = metricsInstance
        }
        if let pushgateway {
            if let problem = MetricsSettings.problem(withPushgateway: pushgateway) {
                FileHandle.standardError.write(Data("zonefeed: --pushgateway \(problem)\n".utf8))
                throw Exit.usage
            }
            settings.pushgateway = pushgateway
        }
        return settings.isEnabled ? MetricsExport.bootstrap(pipeline: pipeline.name, settings: settings) : nil
    }

    /// Runs the pipeline as a service in a group that shuts down gracefully on SIGINT and SIGTERM;
    /// returns the summary, the failure and the signal that stopped it.
    func execute(
        _ pipeline: Pipeline, signals: ShutdownSignals, logger: Logger, metrics: MetricsExport?
    ) async throws -> (RunSummary?, RunError?, Int32?) {
        let showProgress = progress == .always || (progress == .auto && Terminal.shared.isTTY)
        let progressLine = Progress(enabled: showProgress)
        return try await options.withDestination(pipeline, logger: logger) { opened in
            // The run's rows are committed by then: its summary stands, and the run fails
            // saying what was not saved (the next run may be refused).
            // A run that failed besides says both.
            let unsaved: ((RunSummary?, RunError?, Int32?), any Error) -> (RunSummary?, RunError?, Int32?) = { ran, error in
                let (summary, failure, signal) = ran
                guard var failure else {
                    return (summary, RunError(.failed, summary: summary, message: "the run's rows are committed, but \(error)"), signal)
                }
                failure.message += "; and \(error)"
                return (summary, failure, signal)
            }
            return try await options.withSource(pipeline, destination: opened, logger: logger, unsaved: unsaved) { source in
                let (runner, destination) = PipelineOptions.runner(
                    for: pipeline, source: source, destination: opened, zones: zones, shard: shard, logger: logger,
                    events: { event in
                        metrics?.run.record(event)
                        await progressLine.handle(event)
                        RunCommand.log(event, logger: logger)
                    })
                let service = RunService(runner: runner)
                let group = ServiceGroup(
                    configuration: .init(
                        services: [.init(service: service, successTerminationBehavior: .gracefullyShutdownGroup)],
                        logger: logger))
                let outcome: Result<RunSummary, any Error>
                do {
                    try await signals.run(group, logger: logger)
                    outcome = service.result ?? .failure(RunError(.failed, summary: nil, message: "the run ended without a result"))
                } catch {
                    outcome = .failure(error)
                }
                await destination.close()
                switch outcome {
                case .success(let summary) where summary.status == .failed:
                    // Zones failed after their retries, the others applied: exit 1 all the same.
                    let message = summary.error ?? "\(summary.zonesFailed.count) zones failed"
                    return (summary as RunSummary?, RunError(.failed, summary: summary, message: message), signals.exitCode)
                case .success(let summary): return (summary as RunSummary?, nil as RunError?, signals.exitCode)
                case .failure(let error as RunError): return (error.summary, error, signals.exitCode)
                case .failure(let error): return (nil, RunError(.failed, summary: nil, message: "\(error)"), signals.exitCode)
                }
            }
        }
    }

    static func log(_ event: SyncEvent, logger: Logger) {
        switch event {
        case .willFetchChanges(let runID):
            logger.info("run started", metadata: ["run": "\(runID)"])
        case .zoneClaimedElsewhere(let zone):
            logger.info("zone is being applied by another run; skipped", metadata: ["zone": "\(zone.zoneName)"])
        case .willFetchRecordZoneChanges(let zone, let resyncing):
            logger.debug("fetching zone changes", metadata: ["zone": "\(zone.zoneName)", "resyncing": "\(resyncing)"])
        case .fetchedRecordZoneChanges(let zone, let batch, _):
            logger.debug(
                "batch committed",
                metadata: [
                    "zone": "\(zone.zoneName)", "pages": "\(batch.pages)", "upserts": "\(batch.upserts)",
                    "tombstones": "\(batch.tombstones)", "rejects": "\(batch.rejects)",
                ])
            if batch.rejects > 0 {
                logger.warning("records rejected; see zonefeed_rejects", metadata: ["zone": "\(zone.zoneName)", "rejects": "\(batch.rejects)"])
            }
            if batch.swept > 0 {
                logger.info("resync finished; rows missing from the source were tombstoned", metadata: ["zone": "\(zone.zoneName)", "swept": "\(batch.swept)"])
            }
        case .resyncStarted(let zone, let reason):
            logger.warning("resyncing zone from the beginning", metadata: ["zone": "\(zone.zoneName)", "reason": "\(reason)"])
        case .zoneDeleted(let deletion, _):
            logger.notice(
                "zone deleted at the source; its rows were tombstoned",
                metadata: ["zone": "\(deletion.zoneID.zoneName)", "reason": "\(deletion.reason.rawValue)"])
        // A zone's failure is logged by the runner, with the run and the zone.
        case .fetchedDatabaseChanges, .didFetchRecordZoneChanges, .appliedDatabaseChanges, .didFetchChanges, .stateUpdate, .fetchedZonePage:
            break
        }
    }

    static func summaryText(_ s: RunSummary, pipeline: Pipeline, pipelineFile: String) -> String {
        var lines: [String] = []
        let t = s.totals
        let seconds = String(format: "%.2f", s.seconds)
        if s.status == .succeeded && t.records == 0 && t.swept == 0 && s.zonesDeleted.isEmpty {
            var line = "zonefeed \(pipeline.name): nothing new to apply (run \(s.runID), \(seconds) s)"
            if !s.zonesClaimedElsewhere.isEmpty {
                line += "; \(s.zonesClaimedElsewhere.count) zone(s) were being applied by another run"
            }
            return line
        }
        lines.append("zonefeed \(pipeline.name): run \(s.runID) \(s.status.rawValue) in \(seconds) s")
        lines.append(
            "  zones       \(s.zonesApplied.count) applied, \(s.zonesUpToDate.count) up to date, "
                + "\(s.zonesClaimedElsewhere.count) claimed by another run, \(s.zonesFailed.count) failed, \(s.zonesDeleted.count) deleted at the source")
        lines.append("  pages       \(t.pages.grouped)")
        lines.append(
            "  records     \(t.upserts.grouped) upserted, \(t.tombstones.grouped) tombstoned, \(t.rejects.grouped) rejected, \(t.skipped.grouped) skipped (unmapped type)"
        )
        if t.unchanged > 0 {
            lines.append("  unchanged   \(t.unchanged.grouped) records came again with the change tag their row has, and were left as they were")
        }
        if t.swept > 0 { lines.append("  resync      \(t.swept.grouped) rows no longer at the source were tombstoned") }
        lines.append("  throughput  \(Int(s.recordsPerSecond).grouped) records/s")
        if s.throttledSeconds > 0 {
            lines.append("  throttled   \(String(format: "%.1f", s.throttledSeconds)) s waiting because CloudKit asked to slow down")
        }
        for (zone, error) in s.zonesFailed { lines.append("  failed      \(zone.zoneName): \(error)") }
        lines += pipeline.destination.summaryHints(rejects: t.rejects) { subcommand, arguments in
            ([Invocation.command, subcommand] + ([pipelineFile] + arguments).map(Invocation.shellWord)).joined(separator: " ")
        }
        // Each line is ours; what a line holds from outside (a zone's name, a server's error)
        // is escaped, so that the summary stays these lines whatever a server said.
        return lines.map { InertText.escaped($0) }.joined(separator: "\n")
    }
}

extension ZoneShard: ExpressibleByArgument {
    public init?(argument: String) { self.init(argument) }
}
