import CoreMetrics
import Prometheus

/// swift-metrics' backend for zonefeed: swift-prometheus' registry, with the catalog's help
/// text on every metric it knows and the pipeline's label on every series. swift-prometheus'
/// own `PrometheusMetricsFactory` registers every metric without help, and the registry refuses
/// the same name with two help texts, so this factory names the help itself; histograms (which
/// zonefeed does not make) go to swift-prometheus' factory unchanged.
struct ZoneFeedMetricsFactory: MetricsFactory {
    let registry: PrometheusCollectorRegistry
    /// Labels added to every series: `pipeline`.
    let constantLabels: [(String, String)]
    private let histograms: PrometheusMetricsFactory

    init(registry: PrometheusCollectorRegistry, constantLabels: [(String, String)]) {
        self.registry = registry
        self.constantLabels = constantLabels
        histograms = PrometheusMetricsFactory(registry: registry)
    }

    private func descriptor(_ label: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: label, unitName: "", helpText: ZoneFeedMetric.helpByName[label] ?? "")
    }

    private func labels(_ dimensions: [(String, String)]) -> [(String, String)] {
        dimensions + constantLabels.filter { constant in !dimensions.contains { $0.0 == constant.0 } }
    }

    func makeCounter(label: String, dimensions: [(String, String)]) -> any CounterHandler {
        registry.makeCounter(descriptor: descriptor(label), labels: labels(dimensions))
    }

    func makeFloatingPointCounter(label: String, dimensions: [(String, String)]) -> any FloatingPointCounterHandler {
        registry.makeCounter(descriptor: descriptor(label), labels: labels(dimensions))
    }

    func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> any RecorderHandler {
        guard aggregate else { return registry.makeGauge(descriptor: descriptor(label), labels: labels(dimensions)) }
        return histograms.makeRecorder(label: label, dimensions: labels(dimensions), aggregate: true)
    }

    func makeMeter(label: String, dimensions: [(String, String)]) -> any MeterHandler {
        registry.makeGauge(descriptor: descriptor(label), labels: labels(dimensions))
    }

    func makeTimer(label: String, dimensions: [(String, String)]) -> any TimerHandler {
        histograms.makeTimer(label: label, dimensions: labels(dimensions))
    }

    func destroyCounter(_ handler: any CounterHandler) { histograms.destroyCounter(handler) }
    func destroyFloatingPointCounter(_ handler: any FloatingPointCounterHandler) { histograms.destroyFloatingPointCounter(handler) }
    func destroyRecorder(_ handler: any RecorderHandler) { histograms.destroyRecorder(handler) }
    func destroyMeter(_ handler: any MeterHandler) { histograms.destroyMeter(handler) }
    func destroyTimer(_ handler: any TimerHandler) { histograms.destroyTimer(handler) }
}
