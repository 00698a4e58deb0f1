import ZoneFeed

extension MetricsSettings {
    /// Reads `metrics: { file: PATH, pushgateway: URL, job: NAME, instance: NAME }`.
    public static func read(_ top: PipelineSection, pipelineName: String?, from file: PipelineFileReader) -> MetricsSettings? {
        guard let section = file.subsection(key, in: top, allowed: reference.keys.keys(in: key), required: false) else { return nil }
        let reported = file.diagnostics.count
        var settings = MetricsSettings()
        settings.file = file.nonEmptyText("file", in: section, expected: "a file path (node_exporter's textfile folder)")
        if let value = file.text("pushgateway", in: section, expected: "a URL such as http://pushgateway:9091") {
            if let problem = Pushgateway.problem(with: value.text) {
                file.report("\(section.path(of: "pushgateway")) \(problem)", at: value.position)
            } else {
                settings.pushgateway = value.text
            }
        }
        if let job = file.text("job", in: section, expected: "a job name") {
            if job.text.isEmpty {
                file.report("\(section.path(of: "job")) is empty", at: job.position)
            } else {
                settings.job = job.text
            }
        }
        if let instance = file.text("instance", in: section, expected: "a name for this process, such as ${JOB_COMPLETION_INDEX}") {
            if instance.text.isEmpty {
                file.report("\(section.path(of: "instance")) is empty", at: instance.position)
            } else {
                settings.instance = instance.text
            }
        }
        return file.diagnostics.count == reported ? settings : nil
    }
}

extension MetricsSettings {
    /// Every key of `metrics`, for `zonefeed config reference`; the reader takes no other.
    public static let reference = PipelineReference(
        component: "metrics (ZoneFeedMetrics)",
        keys: [
            .section("metrics", "Where a run's metrics go; run's --metrics-file and --pushgateway win (docs/metrics.md)."),
            PipelineKey("metrics.file", takes: "a file path (node_exporter's textfile folder)", "A Prometheus text file, written at the end of a run."),
            PipelineKey("metrics.pushgateway", takes: "a URL such as http://pushgateway:9091", "A Pushgateway the run's metrics are pushed to."),
            PipelineKey("metrics.job", takes: "a job name", default: "zonefeed", "The Pushgateway's job label."),
            PipelineKey(
                "metrics.instance", takes: "a name for this process",
                "An instance label of the pushed group, for processes that share a pipeline (docs/scale-out.md)."),
        ])
}
