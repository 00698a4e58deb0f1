import ZoneFeed
import ZoneFeedMetrics

/// What a run of a pipeline would do, for `zonefeed validate`: the source and the destination,
/// each as it describes itself, and the metrics. Tokens and passwords are shown as `<redacted>`.
struct PipelinePlan: CustomStringConvertible {
    let pipeline: Pipeline

    init(_ pipeline: Pipeline) {
        self.pipeline = pipeline
    }

    var description: String {
        var out: [String] = ["pipeline \(pipeline.name) (\(pipeline.filePath))", ""]
        func row(_ label: String, _ value: String) { out.append(PlanSection.line(label, value)) }
        let context = PlanContext(
            pipelineName: pipeline.name, vaultLocation: pipeline.destination.vaultLocation(pipelineName: pipeline.name),
            declaredIndexes: pipeline.destination.declaredIndexes)
        let source = pipeline.source.plan(context)
        out.append(source.heading)
        for r in source.rows { row(r.label, r.value) }
        out.append("")
        out += pipeline.destination.plan(context)
        if let metrics = pipeline.section(MetricsSettings.self) {
            out.append("")
            out.append("metrics (at the end of each run; run's --metrics-file and --pushgateway win):")
            if let file = metrics.file { row("file", "\(file) (Prometheus text format, for node_exporter's textfile collector)") }
            if let gateway = metrics.pushgateway {
                row(
                    "pushgateway",
                    "\(MetricsSettings.redacted(gateway)) as job=\"\(metrics.job)\", pipeline=\"\(pipeline.name)\""
                        + (metrics.instance.map { ", instance=\"\($0)\"" } ?? ""))
            }
        }
        if let watch = pipeline.section(WatchSettings.self) {
            out.append("")
            out.append("watch (for zonefeed watch; its --poll-interval and --listen win):")
            row("poll interval", "every \(Duration.secondsText(watch.pollIntervalSeconds)), whatever the notifications say")
            row("listen", watch.listen.map { "\($0) (/healthz and /metrics)" } ?? "off")
            row("unhealthy after", "\(Duration.secondsText(watch.unhealthyAfterSeconds)) of failing cycles")
        }
        // Each line is ours; a value in it from the file (a zone's name, a path, a table's
        // name) is escaped, so that no control character it holds reaches the terminal.
        return out.map { InertText.escaped($0) }.joined(separator: "\n")
    }
}
