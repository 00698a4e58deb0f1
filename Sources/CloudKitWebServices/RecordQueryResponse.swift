import CloudKitModel

/// One page of `records/query`: records of one type (or per-record errors), and the marker of the
/// next page when more results exist. A query never reports deletions: a deleted record is
/// simply not among the results.
public struct RecordQueryResponse: Sendable, Hashable, Decodable {
    public var records: [RecordEntry]
    /// nil on the last page.
    public var continuationMarker: String?
    /// The bytes of the body it was read from (`init(reading:)`), which its records' fields
    /// keep alive, and more for fields read into the model (`JSONReader.bytesHeld`); 0 when
    /// decoded otherwise. Not part of what makes two pages the same.
    public var byteCount = 0

    public init(records: [RecordEntry], continuationMarker: String?) {
        self.records = records
        self.continuationMarker = continuationMarker
    }

    enum CodingKeys: String, CodingKey { case records, continuationMarker }

    public static func == (a: Self, b: Self) -> Bool { a.records == b.records && a.continuationMarker == b.continuationMarker }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        records = try c.decode([RecordEntry].self, forKey: .records)
        continuationMarker = try c.decodeIfPresent(String.self, forKey: .continuationMarker)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(records)
        hasher.combine(continuationMarker)
    }
}

extension RecordQueryResponse: JSONReadable {
    /// The page straight from its bytes, as a change feed's page is read.
    /// An answer without `records` (`{}`, `"records": null`: a proxy's, a body of another
    /// shape) is refused: taken as an empty last page, it ended its slice unread, and in a
    /// deletion sweep every row of the slice's times was tombstoned.
    init(reading json: inout JSONReader) throws {
        var records: [RecordEntry] = []
        var marker: String?
        var sawRecords = false
        try json.beginObject()
        while let member = try json.nextKey() {
            if try json.readNullIfPresent() { continue }
            switch member {
            case "records":
                sawRecords = true
                try json.beginArray()
                while try json.nextElement() { records.append(try RecordEntry.readAny(&json)) }
            case "continuationMarker": marker = try json.readString()
            default: try json.skipValue()
            }
        }
        try json.end()
        guard sawRecords else { throw json.failure("a query answer without records") }
        if let marker { try json.checkTokenLength(marker, "continuationMarker") }
        self.init(records: records, continuationMarker: marker)
        byteCount = json.bytesHeld
    }
}

/// A filter of `records/query` on a record's modification time, in milliseconds.
public struct ModificationFilter: Sendable, Hashable {
    public enum Comparator: String, Sendable {
        case lessThan = "LESS_THAN"
        case lessThanOrEquals = "LESS_THAN_OR_EQUALS"
        case greaterThan = "GREATER_THAN"
        case greaterThanOrEquals = "GREATER_THAN_OR_EQUALS"
    }

    public var comparator: Comparator
    public var milliseconds: Int64

    public init(_ comparator: Comparator, _ milliseconds: Int64) {
        self.comparator = comparator
        self.milliseconds = milliseconds
    }
}

/// The order of `records/query`'s results by modification time.
public enum ModificationSort: Sendable, Hashable {
    case ascending, descending
}
