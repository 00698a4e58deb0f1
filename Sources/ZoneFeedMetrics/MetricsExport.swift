import AsyncHTTPClient
import CoreMetrics
import Logging
import Prometheus

/// A run's metrics and where they go: swift-metrics is bootstrapped with a Prometheus registry
/// (once per process), the engine's events and the CloudKit client feed it, and at the end of the
/// run `export` writes the textfile and pushes to the Pushgateway, whichever are set.
public final class MetricsExport: Sendable {
    public let settings: MetricsSettings
    public let pipeline: String
    public let run: RunMetrics
    let registry: PrometheusCollectorRegistry

    /// Makes swift-metrics' backend a Prometheus registry whose every series carries
    /// `pipeline="<name>"`. Call it once, before anything makes a metric.
    public static func bootstrap(pipeline: String, settings: MetricsSettings) -> MetricsExport {
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(ZoneFeedMetricsFactory(registry: registry, constantLabels: [("pipeline", pipeline)]))
        return MetricsExport(pipeline: pipeline, settings: settings, registry: registry)
    }

    init(pipeline: String, settings: MetricsSettings, registry: PrometheusCollectorRegistry) {
        self.pipeline = pipeline
        self.settings = settings
        self.registry = registry
        run = RunMetrics()
    }

    /// Every metric in Prometheus' text format, HELP and TYPE lines included.
    public var text: String { registry.emitToString() }

    /// Writes the metrics file and pushes to the Pushgateway. A failure is logged, never thrown:
    /// the run's own outcome and exit code stand, and a stale last-success timestamp is what an
    /// alert watches anyway.
    public func export(logger: Logger) async {
        let text = self.text
        if let path = settings.file {
            do {
                try MetricsFile(path: path).write(text)
                logger.debug("metrics written", metadata: ["file": "\(path)"])
            } catch {
                logger.error("\(error)")
            }
        }
        if let url = settings.pushgateway {
            let gateway = Pushgateway(baseURL: url, job: settings.job, pipeline: pipeline, instance: settings.instance)
            let client = HTTPClient(eventLoopGroupProvider: .singleton)
            do {
                try await gateway.push(text, httpClient: client)
                logger.debug("metrics pushed", metadata: ["pushgateway": "\(Pushgateway.redacted(url))"])
            } catch {
                logger.error("\(error)")
            }
            try? await client.shutdown()
        }
    }
}
