import CloudKitModel

/// One page of `records/changes`: the zone's changed records, deletions and per-record errors in
/// feed order, the position after them, and whether more follow.
public struct RecordZoneChangesResponse: Sendable, Hashable, Decodable {
    public var records: [RecordEntry]
    public var syncToken: String
    /// `null` on the wire (observed) counts as false.
    public var moreComing: Bool

    public init(records: [RecordEntry], syncToken: String, moreComing: Bool) {
        self.records = records
        self.syncToken = syncToken
        self.moreComing = moreComing
    }

    enum CodingKeys: String, CodingKey { case records, syncToken, moreComing }

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
        var records: [RecordEntry] = []
        var syncToken: String?
        var moreComing = false
        try json.beginObject()
        while let key = try json.nextKey() {
            if try json.readNullIfPresent() { continue }
            switch key {
            case "records":
                try json.beginArray()
                while try json.nextElement() { records.append(try RecordEntry(reading: &json)) }
            case "syncToken": syncToken = try json.readString()
            case "moreComing": moreComing = try json.readBool()
            default: try json.skipValue()
            }
        }
        try json.end()
        guard let syncToken else { throw json.failure("a page without a syncToken") }
        self.init(records: records, syncToken: syncToken, moreComing: moreComing)
    }
}

/// A response decoded by `JSONReader` rather than `JSONDecoder`.
protocol JSONReadable {
    init(reading json: inout JSONReader) throws
}
