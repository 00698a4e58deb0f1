import ZoneFeed

extension FakeSettings: SourceConfiguration {
    public static let key = "fake"

    /// `source.fake`: every key optional, so that `fake:` alone is a pipeline's whole source.
    public static func read(_ source: PipelineSection, pipelineName: String?, from file: PipelineFileReader) -> FakeSettings? {
        let allowed = reference.keys.keys(in: "source.fake")
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
        if let sets = file.integer("fieldSets", in: section, range: FakeSettings.fieldSetsRange) { settings.fieldSets = sets }
        return file.diagnostics.count == reported ? settings : nil
    }
}

extension FakeSettings {
    /// Every key of `source.fake`, for `zonefeed config reference`; the reader takes no other.
    public static let reference = PipelineReference(
        component: "source fake (FakeCloudKit)",
        keys: [
            .section(
                "source.fake", default: "one source is required", "A deterministic generator of zone change feeds: the demo, the tests and the benchmark."),
            PipelineKey("source.fake.seed", takes: "a whole number from 0 to \(UInt64.max)", default: "42", "The same seed gives the same feed."),
            .integer("source.fake.zones", zonesRange, default: 3, "Zones generated."),
            .integer("source.fake.recordsPerZone", recordsPerZoneRange, default: 10_000, "Entries (creations, changes, deletions) per zone."),
            .integer("source.fake.pageSize", pageSizeRange, default: 200, "The most entries a page holds."),
            .integer(
                "source.fake.badRecordEvery", badRecordEveryRange, default: nil,
                "Every Nth created record carries a value that cannot be applied (for the rejects table)."),
            PipelineKey("source.fake.owner", takes: "a user record name", default: "_fakeOwner", "The zones' owner."),
            .boolean("source.fake.churn", default: true, "false makes every entry a new record, like a snapshot from a nil token."),
            .integer(
                "source.fake.fieldSets", fieldSetsRange, default: nil,
                "Notes take their fields from this many sets a zone, each written once, instead of drawing their own (zonefeed bench)."),
        ])
}
