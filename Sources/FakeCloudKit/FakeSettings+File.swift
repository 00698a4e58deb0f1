import ZoneFeed

extension FakeSettings: SourceConfiguration {
    public static let key = "fake"

    /// `source.fake`: every key optional, so that `fake:` alone is a pipeline's whole source.
    public static func read(_ source: PipelineSection, pipelineName: String?, from file: PipelineFileReader) -> FakeSettings? {
        let allowed = ["seed", "zones", "recordsPerZone", "pageSize", "badRecordEvery", "owner", "churn"]
        guard let section = file.subsection("fake", in: source, allowed: allowed, required: true) else { return nil }
        let reported = file.diagnostics.count
        var settings = FakeSettings()
        if let seed = file.unsignedInteger("seed", in: section) { settings.seed = seed }
        if let zones = file.integer("zones", in: section, range: FakeSettings.zonesRange) { settings.zones = zones }
        if let records = file.integer("recordsPerZone", in: section, range: FakeSettings.recordsPerZoneRange) { settings.recordsPerZone = records }
        if let pageSize = file.integer("pageSize", in: section, range: FakeSettings.pageSizeRange) { settings.pageSize = pageSize }
        if let every = file.integer("badRecordEvery", in: section, range: FakeSettings.badRecordEveryRange) { settings.badRecordEvery = every }
        if let owner = file.nonEmptyText("owner", in: section, expected: "a user record name") { settings.owner = owner }
        if let churn = file.boolean("churn", in: section) { settings.churn = churn }
        return file.diagnostics.count == reported ? settings : nil
    }
}
