/// The pipeline file's `watch:` section, for `zonefeed watch`:
///
///     watch:
///       pollInterval: 300          # seconds between safety polls, whatever the notifications say
///       listen: 127.0.0.1:9464     # /healthz and /metrics; off unless set
///       unhealthyAfter: 600        # seconds of failing cycles before /healthz says unhealthy
public struct WatchSettings: SectionConfiguration, Equatable {
    public static let key = "watch"

    public var pollIntervalSeconds: Double = 300
    /// `host:port` for `/healthz` and `/metrics`; nil: no server.
    public var listen: String?
    public var unhealthyAfterSeconds: Double = 600

    /// A second to a day: a safety poll rarer than daily is no safety (docs/watching.md).
    public static let pollIntervalRange = 1.0...86_400.0
    /// A second to a week of failing cycles before `/healthz` says so.
    public static let unhealthyAfterRange = 1.0...604_800.0

    public init() {}

    /// The poll interval as the watcher takes it.
    public var pollInterval: Duration { Duration(clampingSeconds: pollIntervalSeconds) }
    public var unhealthyAfter: Duration { Duration(clampingSeconds: unhealthyAfterSeconds) }

    public static func read(_ top: PipelineSection, pipelineName: String?, from file: PipelineFileReader) -> WatchSettings? {
        guard let section = file.subsection(key, in: top, allowed: reference.keys.keys(in: key), required: false) else { return nil }
        let reported = file.diagnostics.count
        var settings = WatchSettings()
        if let seconds = file.number("pollInterval", in: section, range: pollIntervalRange, unit: "seconds") { settings.pollIntervalSeconds = seconds }
        if let seconds = file.number("unhealthyAfter", in: section, range: unhealthyAfterRange, unit: "seconds") {
            settings.unhealthyAfterSeconds = seconds
        }
        if let value = file.text("listen", in: section, expected: "host:port such as 127.0.0.1:9464") {
            if Self.hostAndPort(value.text) == nil {
                file.report("\(section.path(of: "listen")) must be host:port such as 127.0.0.1:9464, not \(InertText.quoted(value.text))", at: value.position)
            } else {
                settings.listen = value.text
            }
        }
        return file.diagnostics.count == reported ? settings : nil
    }

    /// `host:port` split; nil when it is not that.
    public static func hostAndPort(_ text: String) -> (host: String, port: Int)? {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port) else { return nil }
        let host = String(text[..<colon])
        return host.isEmpty ? nil : (host, port)
    }
}

extension WatchSettings {
    /// Every key of `watch`, for `zonefeed config reference`; the reader takes no other.
    public static let reference = PipelineReference(
        component: "watch (ZoneFeed)",
        keys: [
            .section("watch", "How zonefeed watch runs (docs/watching.md)."),
            .number(
                "watch.pollInterval", pollIntervalRange, unit: "seconds", default: 300,
                "Seconds between safety polls, whatever the notifications say."),
            PipelineKey("watch.listen", takes: "host:port such as 127.0.0.1:9464", default: "off", "Serves /healthz and /metrics."),
            .number(
                "watch.unhealthyAfter", unhealthyAfterRange, unit: "seconds", default: 600,
                "Seconds of failing cycles before /healthz says unhealthy."),
        ])
}
