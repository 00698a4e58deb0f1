import FakeCloudKit
import ZoneFeed
import ZoneFeedCloudKit
import ZoneFeedMetrics
import ZoneFeedPostgres

extension PipelineComponents {
    /// What a pipeline file read by `zonefeed` may name: the command line, the bench and the
    /// tests read files with these. A new source is a module with a `SourceConfiguration`, a new
    /// destination one with a `DestinationConfiguration`, listed here: each makes or opens
    /// itself, and no engine or command-line file changes.
    public static let zonefeed = PipelineComponents(
        sources: [CloudKitSettings.self, FakeSettings.self], destinations: [PostgresSettings.self], sections: [MetricsSettings.self, WatchSettings.self])
}
