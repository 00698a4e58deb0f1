import CloudKitModel
import CloudKitWebServices
import FakeCloudKit
import FakeCloudKitServer
import ZoneFeedPostgres

/// Pages of the bench's records (the fake generator's, no churn: 70% notes of 15 mapped fields
/// and a few unmapped ones, 20% folders, 10% tags, about 1.66 KB of JSON each), read and written
/// as COPY rows into the bench's tables, one record at a time: record `i` of a run reads its page
/// first when it is the page's first. What a backfill does per record, without the network and
/// without PostgreSQL.
public struct PageToRows {
    /// How a page's fields are read.
    public enum Path: String, CaseIterable, Sendable {
        /// Kept as the page's JSON and written from it (`RawFields`), as zonefeed reads a response.
        case straight
        /// Read into a dictionary of `FieldValue`s first, as before issue 26 (and as zonefeed
        /// still reads fields that need repair).
        case model
    }

    public static let recordsPerPage = 200
    public let path: Path
    let pages: [[UInt8]]
    var encoders: [RowEncoder]
    var tables: [String: Int] = [:]
    var entries: [RecordEntry] = []
    public private(set) var rowsWritten = 0

    public init(path: Path, pages count: Int = 5) {
        self.path = path
        let feed = FakeFeed(settings: FakeSettings(seed: 42, zones: 1, recordsPerZone: count * Self.recordsPerPage, churn: false))
        pages = (0..<count).map { page in
            let entries = feed.entries(zone: 0, range: page * Self.recordsPerPage..<(page + 1) * Self.recordsPerPage)
            // As the fake server writes its pages (the bench's HTTP phase reads them): members in
            // CloudKit's order, a reference's too; not sorted by key, as `JSONValue` would.
            var writer = JSONWriter()
            writer.sortsKeys = false
            writer.raw("{\"records\":[")
            for (i, entry) in entries.enumerated() {
                if i > 0 { writer.raw(",") }
                writer.write(entry: entry, zoneID: feed.zoneID(0), desiredKeys: nil)
            }
            writer.raw("],\"syncToken\":")
            writer.writeString("s\(page)")
            writer.raw(",\"moreComing\":true}")
            return writer.bytes
        }
        let mappings = Self.mappings
        encoders = mappings.map { RowEncoder(mapping: $0, keepUnmapped: true) }
        for (i, mapping) in mappings.enumerated() { tables[mapping.recordType] = i }
    }

    /// The bytes of one record's JSON, on average.
    public var bytesPerRecord: Int { pages.reduce(0) { $0 + $1.count } / (pages.count * Self.recordsPerPage) }

    /// Reads record `i` (and its page, when it is the page's first) and writes it as a row.
    public mutating func record(_ i: Int) {
        let inPage = i % Self.recordsPerPage
        if inPage == 0 {
            let body = pages[(i / Self.recordsPerPage) % pages.count]
            let page: RecordZoneChangesResponse?
            switch path {
            case .straight:
                var reader = body.withUnsafeBytes { JSONBytes(copying: $0) }.reader()
                page = try? RecordZoneChangesResponse(reading: &reader)
            case .model:
                page = body.withUnsafeBufferPointer { bytes in
                    var reader = JSONReader(bytes)
                    return try? RecordZoneChangesResponse(reading: &reader)
                }
            }
            entries = page?.records ?? []
            // A batch's rows are sent and forgotten; the buffers are kept (beginning the rows
            // again empties them, as sending them does).
            for t in encoders.indices { encoders[t].beginDirectRows(zone: ZoneID(zoneName: "Zone01"), runID: 1, generation: 1) }
        }
        // As zonefeed's destination takes a batch's entries: sorted into tables by their type,
        // then each record bound out of its entry and appended to its table's rows.
        guard inPage < entries.count, let (recordType, _) = entries[inPage].liveRecordTypeAndName, let t = tables[recordType] else { return }
        guard case .record(let record) = entries[inPage] else { return }
        if encoders[t].append(record, seq: Int32(inPage)) == nil { rowsWritten += 1 }
    }

    /// Writes a page's entries as COPY rows, as zonefeed's destination takes a batch's: sorted
    /// into tables by their type, then each table's records in turn, each appended to its
    /// table's rows where it is in the entries. Returns how many rows were written.
    public static func writeRows(of entries: [RecordEntry], into encoders: inout [RowEncoder]) -> Int {
        var positions = [[Int]](repeating: [], count: encoders.count)
        for i in entries.indices {
            guard let (type, _) = entries[i].liveRecordTypeAndName, let t = mappings.firstIndex(where: { $0.recordType == type }) else { continue }
            positions[t].append(i)
        }
        var written = 0
        for t in encoders.indices {
            encoders[t].beginDirectRows(zone: ZoneID(zoneName: "Zone01"), runID: 1, generation: 1)
            for i in positions[t] {
                guard case .record(let record) = entries[i] else { continue }
                if encoders[t].append(record, seq: Int32(i)) == nil { written += 1 }
            }
        }
        return written
    }

    /// An encoder for each of the bench's tables, in `writeRows`' order.
    public static func encoders() -> [RowEncoder] {
        mappings.map { RowEncoder(mapping: $0, keepUnmapped: true) }
    }

    /// The bench's tables (`zonefeed bench`, pipelines/demo.yml).
    static let mappings: [PostgresRecordTypeMapping] = {
        func fields(_ list: [(String, String, ColumnType)]) -> [PostgresFieldMapping] {
            list.map { PostgresFieldMapping(field: $0.0, column: $0.1, type: $0.2) }
        }
        return [
            PostgresRecordTypeMapping(
                recordType: "Note", table: "notes",
                fields: fields([
                    ("title", "title", .text), ("body", "body", .text), ("wordCount", "word_count", .bigint),
                    ("rating", "rating", .doublePrecision), ("editedAt", "edited_at", .timestamptz), ("thumbnail", "thumbnail", .bytea),
                    ("folder", "folder", .text), ("attachment", "attachment", .jsonb), ("place", "place", .jsonb), ("tags", "tags", .textArray),
                    ("counts", "counts", .bigintArray), ("scores", "scores", .doublePrecisionArray),
                    ("reminders", "reminders", .timestamptzArray), ("chunks", "chunks", .byteaArray), ("related", "related", .textArray),
                ])),
            PostgresRecordTypeMapping(
                recordType: "Folder", table: "folders",
                fields: fields([("name", "name", .text), ("color", "color", .bigint), ("parent", "parent_folder", .text)])),
            PostgresRecordTypeMapping(recordType: "Tag", table: "tags"),
        ]
    }()
}
