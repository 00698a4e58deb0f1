import FakeCloudKit
import ZoneFeed
import ZoneFeedCloudKit
import ZoneFeedPostgres

extension PipelineComponents {
    /// The components the `zonefeed` program is built with (`Sources/zonefeed/PipelineComponents+zonefeed.swift`),
    /// for tests that read pipeline files as it does.
    public static let zonefeed = PipelineComponents(
        sources: [CloudKitSettings.self, FakeSettings.self], destination: PostgresSettings.self)
}
