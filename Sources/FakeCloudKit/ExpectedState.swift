import CloudKitModel
import ZoneFeed

/// The final state a destination must reach after applying a fake feed from the beginning,
/// computed by replaying the feed entry by entry, the simplest way there is. Tests compare the
/// tables with it.
public struct ExpectedState: Sendable {
    public struct Key: Hashable, Sendable, Comparable {
        public var zoneName: String
        public var recordName: String
        public init(zoneName: String, recordName: String) {
            self.zoneName = zoneName
            self.recordName = recordName
        }
        public static func < (a: Key, b: Key) -> Bool { (a.zoneName, a.recordName) < (b.zoneName, b.recordName) }
    }

    public struct Row: Sendable, Hashable {
        /// The last version applied.
        public var record: Record
        public var deleted: Bool
    }

    /// Rows by key (hard deletes leave none).
    public var rows: [Key: Row] = [:]
    /// Entries the destination counts.
    public var upserts = 0
    public var tombstones = 0
    public var rejects = 0
    public var skipped = 0
    public var pages = 0

    /// - Parameters:
    ///   - mappedTypes: record types the pipeline maps to tables; others are skipped.
    ///   - hardDeletes: `deletes: hard`.
    ///   - isRejected: versions the destination refuses; by default the ones the generator made
    ///     unfit (a NUL in a text, a STRING in `wordCount`, which pipelines map as `bigint`).
    public init(
        settings: FakeSettings, mappedTypes: Set<String> = Set(FakeFeed.recordTypes), hardDeletes: Bool = false,
        isRejected: (Record) -> Bool = ExpectedState.isUnfit
    ) {
        let feed = FakeFeed(settings: settings)
        for zone in 0..<settings.zones {
            let zoneName = FakeFeed.zoneName(zone)
            var position = 0
            while position < feed.entriesPerZone {
                let (p, start) = feed.page(containing: position)
                let end = min(feed.entriesPerZone, start + feed.pageSize(p))
                pages += 1
                for entry in feed.entries(zone: zone, range: position..<end) {
                    switch entry {
                    case .record(let record):
                        let key = Key(zoneName: zoneName, recordName: record.recordName)
                        if !mappedTypes.contains(record.recordType) {
                            skipped += 1
                        } else if isRejected(record) {
                            rejects += 1
                        } else {
                            upserts += 1
                            rows[key] = Row(record: record, deleted: false)
                        }
                    case .deleted(let name):
                        let key = Key(zoneName: zoneName, recordName: name)
                        tombstones += 1
                        if hardDeletes {
                            rows[key] = nil
                        } else {
                            rows[key]?.deleted = true
                        }
                    case .error, .unreadable:
                        rejects += 1
                    }
                }
                position = end
            }
        }
    }

    public static let isUnfit: @Sendable (Record) -> Bool = { record in
        if record.fields.values.contains(where: \.containsNUL) { return true }
        if let wc = record.fields["wordCount"], case .int64 = wc { return false }
        return record.fields["wordCount"] != nil
    }

    public var liveCount: Int { rows.values.filter { !$0.deleted }.count }
    public var deletedCount: Int { rows.values.filter(\.deleted).count }
}
