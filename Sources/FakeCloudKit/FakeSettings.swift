/// The deterministic generator's settings; the same settings give the same feed, byte for byte.
public struct FakeSettings: Sendable, Hashable {
    public var seed: UInt64 = 42
    public var zones: Int = 3
    /// How many entries (creates, updates, deletions) each zone's feed holds.
    public var recordsPerZone: Int = 10_000
    /// The most entries a page holds (1...200, like `resultsLimit`).
    public var pageSize: Int = 200
    /// When set, every Nth created record carries a value that cannot be applied (alternately a
    /// text with a NUL byte and a `wordCount` sent as a STRING), to exercise the rejects table.
    public var badRecordEvery: Int?
    /// The zones' owner record name.
    public var owner: String = "_fakeOwner"
    /// With churn (the default) the feed updates, deletes and re-creates records; without it
    /// every entry creates a new record, like a snapshot fetched from a nil token (the benchmark).
    public var churn = true
    /// When set, notes take their fields from this many field sets a zone, each made once,
    /// instead of drawing their own (folders and tags, and the notes made unfit on purpose, still
    /// draw theirs): every note keeps its own name, tag and stamps. For `zonefeed bench`, whose
    /// in-process source would otherwise spend most of its time making JSON that a run over HTTP
    /// receives made (`docs/performance.md`).
    /// Held to `fieldSetsRange` whatever a program sets, so that the sets' memory is bounded and
    /// what the plan shows and the feed's tokens hash is what the feed draws.
    public var fieldSets: Int? {
        didSet { fieldSets = fieldSets.map(Self.heldToRange) }
    }

    // The ranges of the settings (docs/pipeline-file.md), shared by `source.fake` and
    // `zonefeed fake-server`'s flags. A hundred million entries a zone keeps every position,
    // page and timestamp the generator computes far inside Int64.
    public static let zonesRange = 1...1_000
    public static let recordsPerZoneRange = 0...100_000_000
    public static let pageSizeRange = 1...200
    public static let badRecordEveryRange = 1...100_000_000
    /// A set is about 2.3 KB (its JSON and its twenty fields' notes): 2.4 MB a zone at 1,024,
    /// 9.5 MB at 4,096.
    public static let fieldSetsRange = 1...4_096
    static func heldToRange(_ sets: Int) -> Int { min(max(sets, fieldSetsRange.lowerBound), fieldSetsRange.upperBound) }

    public init(
        seed: UInt64 = 42, zones: Int = 3, recordsPerZone: Int = 10_000, pageSize: Int = 200, badRecordEvery: Int? = nil,
        churn: Bool = true, fieldSets: Int? = nil
    ) {
        self.seed = seed
        self.zones = zones
        self.recordsPerZone = recordsPerZone
        self.pageSize = pageSize
        self.badRecordEvery = badRecordEvery
        self.churn = churn
        self.fieldSets = fieldSets.map(Self.heldToRange)
    }
}
