import FakeCloudKit
import ZoneFeed
import ZoneFeedCloudKit
import ZoneFeedPostgres

extension PipelineComponents {
    /// What a pipeline file read by this program may name. A new source is a module with a
    /// `SourceConfiguration`, listed here and built in `PipelineOptions.withSource`.
    static let zonefeed = PipelineComponents(
        sources: [CloudKitSettings.self, FakeSettings.self], destination: PostgresSettings.self)
}

extension Pipeline {
    /// This program's destination: every pipeline it loads is read with
    /// `PipelineComponents.zonefeed`, whose destination is PostgreSQL.
    var postgres: PostgresSettings {
        guard let settings = destination as? PostgresSettings else {
            preconditionFailure("pipeline \(name) was not loaded with PipelineComponents.zonefeed")
        }
        return settings
    }
}
