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

/// A page of `records/changes` received but not decoded yet. Its `syncToken` and `moreComing`
/// are read at once, past records that are only checked, so that the next page can be requested
/// while this one is decoded: during a backfill the server then writes a page while the client
/// reads the one before.
public struct UndecodedRecordZoneChanges: Sendable {
    public let body: Data
    public let syncToken: String
    public let moreComing: Bool
    /// The request's path, for errors.
    let path: String

    /// Reads the page's token, passing over the records without checking them (`decoded()`
    /// does); throws what `JSONReader` finds wrong on the way.
    init(body: Data, path: String) throws {
        var syncToken: String?
        var moreComing = false
        try body.withUnsafeBytes { raw in
            var json = JSONReader(raw.bindMemory(to: UInt8.self))
            try json.beginObject()
            while let key = try json.nextKey() {
                if try json.readNullIfPresent() { continue }
                switch key {
                case "syncToken": syncToken = try json.readString()
                case "moreComing": moreComing = try json.readBool()
                default: try json.skipValueLoosely()
                }
            }
            try json.end()
            guard syncToken != nil else { throw json.failure("a page without a syncToken") }
        }
        self.body = body
        self.syncToken = syncToken!
        self.moreComing = moreComing
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
