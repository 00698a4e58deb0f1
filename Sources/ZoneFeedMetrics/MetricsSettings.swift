import ZoneFeed

/// Where a run's metrics go (the pipeline file's `metrics:` section; `zonefeed run
/// --metrics-file` and `--pushgateway` override it): Prometheus' two ways for batch jobs.
public struct MetricsSettings: SectionConfiguration, Equatable {
    public static let key = "metrics"

    /// A file in Prometheus' text format for node_exporter's textfile collector, replaced
    /// atomically at the end of each run.
    public var file: String?
    /// A Pushgateway's base URL (`http://pushgateway:9091`): the run's metrics are pushed there at
    /// its end, grouped under `job` and `pipeline`.
    public var pushgateway: String?
    /// The `job` label of the pushed group.
    public var job = "zonefeed"
    /// An `instance` label of the pushed group, when processes share a pipeline: each pushes
    /// its own group (a Kubernetes Indexed Job's `$(JOB_COMPLETION_INDEX)`), where one group
    /// would hold whichever pushed last.
    public var instance: String?

    public init(file: String? = nil, pushgateway: String? = nil) {
        self.file = file
        self.pushgateway = pushgateway
    }

    /// Why a URL cannot be a Pushgateway's (a sentence to follow its name); nil when it can.
    public static func problem(withPushgateway url: String) -> String? {
        Pushgateway.problem(with: url)
    }

    /// A Pushgateway URL without its user or password, for messages and plans.
    public static func redacted(_ url: String) -> String {
        Pushgateway.redacted(url)
    }

    /// Whether the run's metrics go anywhere.
    public var isEnabled: Bool { file != nil || pushgateway != nil }
}
