import ArgumentParser
import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import ServiceLifecycle
import ZoneFeed
import ZoneFeedMetrics

struct WatchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch",
        abstract: "Catch up, then keep the destination within seconds of the source until SIGTERM or SIGINT.",
        discussion: """
            Each cycle is an ordinary incremental run, recorded in zonefeed_runs. With a CloudKit \
            source, zone subscriptions and the web courier start a cycle within a second of a \
            change; a safety poll runs every watch.pollInterval seconds whatever the notifications \
            say, and alone when notifications cannot be had. A requested stop lets the current \
            batch commit or roll back and exits 0.
            """)

    @OptionGroup var options: PipelineOptions

    @Option(help: "Serve /healthz and /metrics on host:port (overrides watch.listen).")
    var listen: String?

    @Option(name: .customLong("poll-interval"), help: "Seconds between safety polls, 1 to 86400 (overrides watch.pollInterval).")
    var pollInterval: Double?

    func validate() throws {
        if let pollInterval { try FlagRange.check("--poll-interval", pollInterval, in: WatchSettings.pollIntervalRange, unit: "seconds") }
    }

    func run() async throws {
        // Trapped from the start: a signal before the watch can stop gracefully exits at once.
        let signals = await ShutdownSignals()
        defer { signals.end() }
        let pipeline = try options.loadPipeline()
        let logger = options.makeLogger(for: pipeline)
        var settings = pipeline.section(WatchSettings.self) ?? WatchSettings()
        if let pollInterval { settings.pollIntervalSeconds = pollInterval }
        if let listen {
            guard WatchSettings.hostAndPort(listen) != nil else { throw ValidationError("--listen must be host:port such as 127.0.0.1:9464") }
            settings.listen = listen
        }
        let metrics = MetricsExport.bootstrap(pipeline: pipeline.name, settings: pipeline.section(MetricsSettings.self) ?? MetricsSettings())
        let health = WatchHealth()

        try await options.withDestination(pipeline, logger: logger) { opened in
            try await options.withSource(pipeline, destination: opened, logger: logger) { source in
                let watcher = Watcher(
                    configuration: .init(pollInterval: settings.pollInterval),
                    notifier: source as? any ChangeNotifying, health: health, logger: logger
                ) { trigger in
                    try await Self.cycle(
                        pipeline, source: source, destination: opened, trigger: trigger, metrics: metrics, health: health, logger: logger,
                        pipelineFile: options.pipelineFile)
                }
                var services: [ServiceGroupConfiguration.ServiceConfiguration] = [
                    .init(service: WatchService(watcher: watcher), successTerminationBehavior: .gracefullyShutdownGroup)
                ]
                if let listen = settings.listen, let (host, port) = WatchSettings.hostAndPort(listen) {
                    services.append(
                        .init(
                            service: Self.healthServer(
                                host: host, port: port, health: health, metrics: metrics,
                                unhealthyAfter: settings.unhealthyAfter, logger: logger)))
                }
                logger.info(
                    "watching",
                    metadata: [
                        "pollInterval": "\(Duration.secondsText(settings.pollIntervalSeconds))", "listen": "\(settings.listen ?? "off")",
                        "notifications": "\(source is any ChangeNotifying ? "subscriptions" : "none (polling)")",
                    ])
                try await signals.run(ServiceGroup(configuration: .init(services: services, logger: logger)), logger: logger)
                logger.notice("watch stopped", metadata: ["signal": "\(signals.received.map { "\($0)" } ?? "none")"])
            }
        }
        Terminal.shared.endProgress()
    }

    /// One incremental run on a destination of its own: the same work as `zonefeed run`.
    static func cycle(
        _ pipeline: Pipeline, source: any ChangeSource, destination opened: any OpenedDestination, trigger: Watcher.Trigger, metrics: MetricsExport,
        health: WatchHealth, logger: Logger,
        pipelineFile: String
    ) async throws -> RunSummary {
        let (runner, destination) = PipelineOptions.runner(
            for: pipeline, source: source, destination: opened, logger: logger,
            events: { event in
                await health.cycleProgressed()
                metrics.run.record(event)
                // A cycle's start is news only when debugging: the cycles that brought something
                // say so when they end ("cycle succeeded").
                if case .willFetchChanges(let runID) = event {
                    logger.debug("cycle started", metadata: ["trigger": "\(trigger.rawValue)", "run": "\(runID)"])
                } else {
                    RunCommand.log(event, logger: logger)
                }
            })
        let summary: RunSummary
        let began = ContinuousClock.now
        do {
            summary = try await runner.run()
        } catch let error as RunError {
            await destination.close()
            let code = RunCommand.exitCode(of: error, signal: nil)
            // Watch goes on polling (and /healthz turns unhealthy). It keeps its tokens in
            // memory and would write them over a new sign-in's: stop it, sign in, start it.
            if error.kind == .authentication {
                logger.error(
                    "\(LoginCommand.signInNeeded(pipelineFile: pipelineFile, message: error.message, watching: true, signsIn: pipeline.source.signsIn))")
            }
            metrics.run.finish(status: error.summary?.status, exitCode: code, runID: error.summary?.runID, seconds: error.summary?.seconds)
            guard let failed = error.summary else { throw error }
            return failed
        } catch {
            await destination.close()
            // A cycle that could not start (its destination unreachable or refusing it) is
            // live in /metrics as refused, not as the last cycle that ended.
            if !(error is CancellationError) {
                metrics.run.finish(status: nil, exitCode: 1, runID: nil, seconds: (ContinuousClock.now - began).seconds)
            }
            throw error
        }
        await destination.close()
        metrics.run.finish(status: summary.status, exitCode: summary.status == .succeeded ? 0 : 1, runID: summary.runID, seconds: summary.seconds)
        let t = summary.totals
        if t.records > 0 || t.swept > 0 || !summary.zonesDeleted.isEmpty || summary.status != .succeeded {
            logger.info(
                "cycle \(summary.status.rawValue)",
                metadata: [
                    "trigger": "\(trigger.rawValue)", "run": "\(summary.runID)", "upserted": "\(t.upserts)", "tombstoned": "\(t.tombstones)",
                    "rejected": "\(t.rejects)", "seconds": "\(String(format: "%.3f", summary.seconds))",
                ])
        }
        return summary
    }

    /// `/healthz` (200 once caught up and while cycles succeed or have failed for less than
    /// `unhealthyAfter`, and the cycle running now has not stalled; 503 otherwise) and `/metrics` (the run metrics, live).
    static func healthServer(
        host: String, port: Int, health: WatchHealth, metrics: MetricsExport, unhealthyAfter: Duration, logger: Logger
    ) -> some Service {
        let router = Router()
        router.get("healthz") { _, _ -> Response in
            let healthy = await health.isHealthy(failingFor: unhealthyAfter)
            let caughtUp = await health.caughtUp
            let error = await health.lastError
            var text = healthy ? "ok" : (caughtUp ? "unhealthy" : "catching up")
            switch await health.push {
            case .on: text += "\nnotifications: on"
            case .starting: text += "\nnotifications: starting (waiting for the web courier's first answer; polling meanwhile)"
            case .off: text += "\nnotifications: off (polling)"
            }
            if let stalled = await health.cycleStalled(for: unhealthyAfter) {
                text += "\nthe cycle running now has shown no progress for \(stalled.components.seconds) s (waiting on PostgreSQL or CloudKit)"
            }
            // A server's reason, printed by whoever curls the probe.
            if let error { text += "\nlast error: \(InertText.escaped("\(error)"))" }
            return Response(
                status: healthy ? .ok : .serviceUnavailable, headers: [.contentType: "text/plain; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: text + "\n")))
        }
        router.get("metrics") { _, _ -> Response in
            Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: metrics.text)))
        }
        // Whoever can reach the address (any pod of a cluster, with `0.0.0.0`) must not be able
        // to hold the process's file descriptors, which it shares with its CloudKit and
        // PostgreSQL connections: a connection idle, or whose request is late (a probe's or a
        // scrape's is done in milliseconds), is closed, and no more than a small listener's
        // are taken at once (`RequestDeadline.boundedHTTP1`).
        return Application(
            router: router, server: RequestDeadline.boundedHTTP1,
            configuration: .init(
                address: .hostname(host, port: port), serverName: "zonefeed",
                availableConnectionsDelegate: MaximumAvailableConnections(RequestDeadline.connections)),
            onServerRunning: { channel in
                // The bound address, so that port 0 (any free port) can be found from the log.
                let address = channel.localAddress.map { "\($0.ipAddress ?? host):\($0.port ?? port)" } ?? "\(host):\(port)"
                logger.notice("serving /healthz and /metrics", metadata: ["address": "\(address)"])
            }, logger: logger)
    }
}

/// The watcher as a `Service`: a graceful shutdown cancels it, which stops the current cycle
/// between batches.
struct WatchService: Service {
    let watcher: Watcher

    func run() async throws {
        await cancelWhenGracefulShutdown { await watcher.run() }
    }
}
