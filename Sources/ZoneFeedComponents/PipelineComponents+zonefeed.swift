import FakeCloudKit
import ZoneFeed
import ZoneFeedCloudKit
import ZoneFeedMetrics
import ZoneFeedPostgres

extension PipelineComponents {
    /// What a pipeline file read by `zonefeed` may name: the command line, the bench and the
    /// tests read files with these. A new source is a module with a `SourceConfiguration`, listed
    /// here and built in the command line's `PipelineOptions.withSource`.
    public static let zonefeed = PipelineComponents(
        sources: [CloudKitSettings.self, FakeSettings.self], destination: PostgresSettings.self, sections: [MetricsSettings.self, WatchSettings.self])
}

extension Pipeline {
    /// The PostgreSQL settings of a pipeline read with `PipelineComponents.zonefeed`, whose only
    /// destination is PostgreSQL.
    public var postgres: PostgresSettings {
        guard let settings = destination as? PostgresSettings else {
            preconditionFailure("pipeline \(name) was not read with PipelineComponents.zonefeed")
        }
        return settings
    }
}
