import Logging
import ZoneFeed

/// `source.fake` makes its source and describes it.
extension FakeSettings {
    public func makeSource(_ context: SourceContext, logger: Logger) async throws -> any ChangeSource {
        FakeSource(settings: self)
    }

    public func plan(_ context: PlanContext) -> PlanSection {
        var plan = PlanSection(heading: "source: fake (deterministic generator)")
        plan.row("seed", "\(seed)")
        plan.row("zones", "\(zones)")
        plan.row("recordsPerZone", "\(recordsPerZone)")
        plan.row("pageSize", "\(pageSize)")
        plan.row("badRecordEvery", badRecordEvery.map { "1 in every \($0) created records" } ?? "never")
        plan.row("owner", owner)
        plan.row("churn", churn ? "updates, deletions and re-creations" : "none (every entry creates a record)")
        if let fieldSets { plan.row("fieldSets", "notes take their fields from \(fieldSets) sets a zone") }
        return plan
    }
}
