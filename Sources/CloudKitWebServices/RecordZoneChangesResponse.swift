import CloudKitModel
import Foundation

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
        let page = try json.readChangesPage(items: "records") { try RecordEntry(reading: &$0) }
        self.init(records: page.items, syncToken: page.syncToken, moreComing: page.moreComing)
    }
}

extension JSONReader {
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
                while try nextElement() { items.append(try item(&self)) }
            case "syncToken": syncToken = try readString()
            case "moreComing": moreComing = try readBool()
            default: try skipValue()
            }
        }
        try end()
        guard let syncToken else { throw failure("a page without a syncToken") }
        return (items, syncToken, moreComing)
    }
}

/// A page of `records/changes` received but not decoded yet. Its `syncToken` and `moreComing`
/// are read at once, so that the next page can be requested while this one is decoded: during a
/// backfill the server then writes a page while the client reads the one before.
public struct UndecodedRecordZoneChanges: Sendable {
    public let body: Data
    /// The page's token and `moreComing` as read before decoding; `decoded()` has the page's
    /// own, and differs only when the page is not what it seemed (a caller that acted on these
    /// must then undo it).
    public let syncToken: String
    public let moreComing: Bool
    /// The request's path, for errors.
    let path: String

    /// Reads the page's token. CloudKit puts it after the records, so it is first looked for
    /// from the end of the body; failing that, the body is read from the start, passing over the
    /// records without checking them (`decoded()` does). Throws what `JSONReader` finds wrong.
    init(body: Data, path: String) throws {
        let guessed = body.withUnsafeBytes { raw -> (String, Bool)? in
            let bytes = raw.bindMemory(to: UInt8.self)
            guard let token = JSONReader.lastMember("syncToken", in: bytes, { try $0.readString() }),
                let more = JSONReader.lastMember("moreComing", in: bytes, { try $0.readNullIfPresent() ? false : try $0.readBool() })
            else { return nil }
            return (token, more)
        }
        if let (token, more) = guessed {
            syncToken = token
            moreComing = more
        } else {
            var token: String?
            var more = false
            try body.withUnsafeBytes { raw in
                var json = JSONReader(raw.bindMemory(to: UInt8.self))
                try json.beginObject()
                while let key = try json.nextKey() {
                    if try json.readNullIfPresent() { continue }
                    switch key {
                    case "syncToken": token = try json.readString()
                    case "moreComing": more = try json.readBool()
                    default: try json.skipValueLoosely()
                    }
                }
                try json.end()
                guard token != nil else { throw json.failure("a page without a syncToken") }
            }
            syncToken = token!
            moreComing = more
        }
        self.body = body
        self.path = path
    }

    /// The page's records; a record the model cannot take is a `malformedResponse`.
    public func decoded() throws -> RecordZoneChangesResponse {
        do {
            return try body.withUnsafeBytes { raw in
                var reader = JSONReader(raw.bindMemory(to: UInt8.self))
                return try RecordZoneChangesResponse(reading: &reader)
            }
        } catch {
            throw CloudKitError(
                code: .malformedResponse, reason: CloudKitClient.summary(of: error, byteCount: body.count),
                operation: "records/changes", path: path)
        }
    }
}

/// A response decoded by `JSONReader` rather than `JSONDecoder`.
protocol JSONReadable {
    init(reading json: inout JSONReader) throws
}
