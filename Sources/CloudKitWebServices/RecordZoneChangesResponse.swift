import CloudKitModel
import Foundation

/// One page of `records/changes`: the zone's changed records, deletions and per-record errors in
/// feed order, the position after them, and whether more follow.
public struct RecordZoneChangesResponse: Sendable, Hashable, Decodable {
    public var records: [RecordEntry]
    public var syncToken: String
    /// `null` on the wire (observed) counts as false.
    public var moreComing: Bool
    /// The bytes of the body it was read from (`init(reading:)`), which its records' fields
    /// keep alive, and more for fields read into the model (`JSONReader.bytesHeld`); 0 when
    /// decoded otherwise. Not part of what makes two pages the same.
    public var byteCount = 0

    public init(records: [RecordEntry], syncToken: String, moreComing: Bool) {
        self.records = records
        self.syncToken = syncToken
        self.moreComing = moreComing
    }

    enum CodingKeys: String, CodingKey { case records, syncToken, moreComing }

    public static func == (a: Self, b: Self) -> Bool {
        a.records == b.records && a.syncToken == b.syncToken && a.moreComing == b.moreComing
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(records)
        hasher.combine(syncToken)
        hasher.combine(moreComing)
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        records = try c.decodeIfPresent([RecordEntry].self, forKey: .records) ?? []
        syncToken = try c.decode(String.self, forKey: .syncToken)
        moreComing = try c.decodeIfPresent(Bool.self, forKey: .moreComing) ?? false
    }
}

extension RecordZoneChangesResponse: JSONReadable {
    /// The page straight from its bytes (the hot path of a backfill), with the meaning of
    /// `init(from:)`.
    public init(reading json: inout JSONReader) throws {
        let page = try json.readChangesPage(items: "records") { try RecordEntry.readAny(&$0) }
        self.init(records: page.items, syncToken: page.syncToken, moreComing: page.moreComing)
        byteCount = json.bytesHeld
    }
}

extension JSONReader {
    /// The most items CloudKit puts in a page.
    static let fullPage = 200

    /// A page of a change feed: `{"<items>": [...], "syncToken": "...", "moreComing": bool}`
    /// in any order, other members passed over, `null` as absent; nothing may follow it.
    mutating func readChangesPage<Item>(
        items key: String, _ item: (inout JSONReader) throws -> Item
    ) throws -> (items: [Item], syncToken: String, moreComing: Bool) {
        var items: [Item] = []
        var syncToken: String?
        var moreComing = false
        try beginObject()
        while let member = try nextKey() {
            if try readNullIfPresent() { continue }
            switch member {
            case key:
                try beginArray()
                // Room for a full page (CloudKit's largest resultsLimit) made once: grown from
                // nothing, the array was copied eight times a page, 0.6% of the micro-benchmark's
                // instructions (callgrind).
                items.reserveCapacity(Self.fullPage)
                while try nextElement() { items.append(try item(&self)) }
            case "syncToken": syncToken = try readString()
            case "moreComing": moreComing = try readBool()
            default: try skipValue()
            }
        }
        try end()
        guard let syncToken else { throw failure("a page without a syncToken") }
        // PostgreSQL's text cannot hold a NUL: a token with one could never be committed, and
        // every run would meet it again at the same page, failing where it stands.
        guard !syncToken.utf8.contains(0) else { throw failure("a syncToken holding a NUL character, which no checkpoint can keep") }
        try checkTokenLength(syncToken, "syncToken")
        return (items, syncToken, moreComing)
    }

    /// The most bytes a sync token or continuation marker may take. CloudKit's take a few
    /// hundred; each is held for the pages after it and written into the checkpoint with every
    /// batch (a query zone's token holds the markers of all its slices), so one of megabytes, from
    /// a broken or hostile server, would cost that much again at every page. Refused as an
    /// answer CloudKit does not send.
    static let maxTokenBytes = 64 * 1024

    func checkTokenLength(_ token: String, _ member: String) throws {
        let count = token.utf8.count
        guard count <= Self.maxTokenBytes else {
            throw failure("a \(member) of \(count) bytes, more than the \(Self.maxTokenBytes / 1024) KiB a token may take")
        }
    }
}

/// An answer that may hold entries of no shape CloudKit sends (`UnreadableEntry.ofNoKnownShape`):
/// such an answer is asked for once more (a proxy's or a server's passing fault), then taken
/// with them as rejects, unless one has no name to keep its row by (`sendWithRetries`).
protocol EntriesOfNoKnownShape {
    var records: [RecordEntry] { get }
}

extension EntriesOfNoKnownShape {
    var entriesOfNoKnownShape: Int { records.count { if case .unreadable(let u) = $0 { u.ofNoKnownShape } else { false } } }
    var namelessEntriesOfNoKnownShape: Int {
        records.count { if case .unreadable(let u) = $0 { u.ofNoKnownShape && $0.nameOfARecordStillThere == nil } else { false } }
    }
}

extension RecordZoneChangesResponse: EntriesOfNoKnownShape {}

extension RecordQueryResponse: EntriesOfNoKnownShape {}

/// A response decoded by `JSONReader` rather than `JSONDecoder`.
protocol JSONReadable {
    init(reading json: inout JSONReader) throws
}
