/// Who and when for `created` and `modified`.
public struct RecordStamp: Sendable, Hashable, Codable {
    /// Milliseconds since the epoch.
    public var timestamp: Int64
    public var userRecordName: String?
    public var deviceID: String?

    public init(timestamp: Int64, userRecordName: String? = nil, deviceID: String? = nil) {
        self.timestamp = timestamp
        self.userRecordName = userRecordName
        self.deviceID = deviceID
    }
}

/// A live record as a change feed delivers it.
public struct Record: Sendable, Hashable, Codable {
    public var recordName: String
    public var recordType: String
    public var recordChangeTag: String?
    /// The fields as they are held: read from a page, they stay the page's JSON until a
    /// destination reads them from there (`RowEncoder`), which saves a dictionary and a String
    /// per field.
    public var storedFields: RecordFields
    public var created: RecordStamp?
    public var modified: RecordStamp?
    public var zoneID: ZoneID?

    // No initializer here, so that Swift makes the memberwise one, `init(recordName:recordType:
    // recordChangeTag:storedFields:created:modified:zoneID:)`, which the readers in this module
    // use. Written out (`self.recordName = recordName`, …), it built each record twice: made in
    // a temporary, copied into place with a retain of each string and the temporary released:
    // 744 instructions a record read from a page, 629 made by the fake source (`Benchmarks/run
    // callgrind`).
}

extension Record {
    public init(
        recordName: String, recordType: String, recordChangeTag: String? = nil,
        fields: [String: FieldValue] = [:], created: RecordStamp? = nil, modified: RecordStamp? = nil,
        zoneID: ZoneID? = nil
    ) {
        self.init(
            recordName: recordName, recordType: recordType, recordChangeTag: recordChangeTag, storedFields: .values(fields),
            created: created, modified: modified, zoneID: zoneID)
    }

    /// The fields in the model (read from the page's JSON when they are held so).
    public var fields: [String: FieldValue] {
        get { storedFields.values }
        set { storedFields = .values(newValue) }
    }

    public static func == (a: Record, b: Record) -> Bool {
        a.recordName == b.recordName && a.recordType == b.recordType && a.recordChangeTag == b.recordChangeTag
            && a.created == b.created && a.modified == b.modified && a.zoneID == b.zoneID && a.fields == b.fields
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(recordName)
        hasher.combine(recordType)
        hasher.combine(recordChangeTag)
    }

    enum CodingKeys: String, CodingKey { case recordName, recordType, recordChangeTag, fields, created, modified, zoneID }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            recordName: try c.decode(String.self, forKey: .recordName), recordType: try c.decode(String.self, forKey: .recordType),
            recordChangeTag: try c.decodeIfPresent(String.self, forKey: .recordChangeTag),
            // Absent as `RecordEntry(reading:)` takes it: a query asked for no fields
            // (`desiredKeys: []`) may send none.
            fields: try c.decodeIfPresent([String: FieldValue].self, forKey: .fields) ?? [:],
            created: try c.decodeIfPresent(RecordStamp.self, forKey: .created), modified: try c.decodeIfPresent(RecordStamp.self, forKey: .modified),
            zoneID: try c.decodeIfPresent(ZoneID.self, forKey: .zoneID))
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(recordName, forKey: .recordName)
        try c.encode(recordType, forKey: .recordType)
        try c.encodeIfPresent(recordChangeTag, forKey: .recordChangeTag)
        try c.encode(fields, forKey: .fields)
        try c.encodeIfPresent(created, forKey: .created)
        try c.encodeIfPresent(modified, forKey: .modified)
        try c.encodeIfPresent(zoneID, forKey: .zoneID)
    }
}

/// A per-record error inside a `records[]` array.
public struct RecordError: Sendable, Hashable, Codable, Error {
    public var recordName: String?
    public var reason: String?
    public var serverErrorCode: String
    public var retryAfter: Double?
    public var uuid: String?

    public init(recordName: String?, reason: String?, serverErrorCode: String, retryAfter: Double? = nil, uuid: String? = nil) {
        self.recordName = recordName
        self.reason = reason
        self.serverErrorCode = serverErrorCode
        self.retryAfter = retryAfter
        self.uuid = uuid
    }

    /// What the entry says of itself besides its name and code is taken when it has the type it
    /// should, and otherwise left out (`"reason": 7`, a retryAfter that is text or past
    /// Double's range), as a failed request's body is read: one odd entry no longer makes its
    /// page malformed.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        recordName = try c.decodeIfPresent(String.self, forKey: .recordName)
        serverErrorCode = try c.decode(String.self, forKey: .serverErrorCode)
        reason = try? c.decodeIfPresent(String.self, forKey: .reason)
        retryAfter = (try? c.decodeIfPresent(Double.self, forKey: .retryAfter)).flatMap { $0.isFinite ? $0 : nil }
        uuid = try? c.decodeIfPresent(String.self, forKey: .uuid)
    }

    /// Whether the code says the record is not there (rather than that it could not be given
    /// now, or not to this caller).
    public var saysTheRecordIsGone: Bool { serverErrorCode == "UNKNOWN_ITEM" || serverErrorCode == "NOT_FOUND" }
}

/// An entry that cannot be taken as the server sent it: text that is not UTF-8 (invalid bytes,
/// an unpaired surrogate escape), which would have to be changed to be stored, and might then
/// land on another record's name; a timestamp no clock holds; or valid JSON of no shape CloudKit
/// sends (`ofNoKnownShape`). It is never applied: it goes to the rejects with `problem`.
public struct UnreadableEntry: Sendable, Hashable {
    /// As read, with unreadable text replaced by U+FFFD: for the reject, never as an identity.
    public var recordName: String?
    public var recordType: String?
    /// What is wrong, naming the member or field, never quoting the value.
    public var problem: String
    /// The entry as read (unreadable text replaced), for the rejects' `raw`.
    public var json: JSONValue
    /// Whether `recordName` had bytes that are not UTF-8, replaced: then it is not the
    /// record's name. A name that holds U+FFFD as sent is.
    public var nameRepaired: Bool
    /// Whether the entry is of no shape CloudKit sends (valid JSON, but a record without a
    /// name, a field that is not an object…): its page is fetched again while the attempts last,
    /// as a page that is not JSON is, and only the last answer's such entries are rejects.
    public var ofNoKnownShape: Bool

    public init(recordName: String?, recordType: String?, problem: String, json: JSONValue, nameRepaired: Bool = false, ofNoKnownShape: Bool = false) {
        self.recordName = recordName
        self.recordType = recordType
        self.problem = problem
        self.json = json
        self.nameRepaired = nameRepaired
        self.ofNoKnownShape = ofNoKnownShape
    }
}

/// One entry of a zone change page, classified in the order the reference gives: an error entry
/// (has `serverErrorCode`), a deletion (`deleted: true`, no type), or a live record; or one
/// zonefeed cannot take as sent (`UnreadableEntry`).
public enum RecordEntry: Sendable, Hashable {
    case record(Record)
    case deleted(recordName: String)
    case error(RecordError)
    case unreadable(UnreadableEntry)

    /// A live record's type and name; nil for any other entry. Inlined, so that a caller reading
    /// an entry of an array copies these two strings rather than the whole record, a retain and
    /// a release of each of its references.
    @inlinable public var liveRecordTypeAndName: (type: String, name: String)? {
        guard case .record(let record) = self else { return nil }
        return (record.recordType, record.recordName)
    }

    public var recordName: String? {
        switch self {
        case .record(let r): return r.recordName
        case .deleted(let name): return name
        case .error(let e): return e.recordName
        case .unreadable(let u): return u.recordName
        }
    }

    /// The name of a record the entry says is at the source, whether or not it can be applied:
    /// a live record's, an error entry's for that record alone unless its code says the record
    /// is gone, and an unreadable entry's when nothing of the name was repaired (a repaired name
    /// is never an identity). Nil for a deletion and for every other entry.
    public var nameOfARecordStillThere: String? {
        switch self {
        case .record(let r): return r.recordName
        case .deleted: return nil
        case .error(let e): return e.saysTheRecordIsGone ? nil : e.recordName
        case .unreadable(let u): return u.nameRepaired ? nil : u.recordName
        }
    }
}

extension RecordEntry: Codable {
    enum CodingKeys: String, CodingKey { case recordName, deleted, serverErrorCode, zoneID }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        if c.contains(.serverErrorCode) {
            self = .error(try RecordError(from: decoder))
        } else if try c.decodeIfPresent(Bool.self, forKey: .deleted) == true {
            self = .deleted(recordName: try c.decode(String.self, forKey: .recordName))
        } else {
            self = .record(try Record(from: decoder))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .record(let r): try r.encode(to: encoder)
        case .error(let e): try e.encode(to: encoder)
        case .unreadable(let u): try u.json.encode(to: encoder)
        case .deleted(let name):
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(name, forKey: .recordName)
            try c.encode(true, forKey: .deleted)
        }
    }
}

extension Record {
    /// The record's wire form, for the rejects table.
    public var json: JSONValue {
        var o: [String: JSONValue] = [
            "recordName": .string(recordName), "recordType": .string(recordType),
            "fields": .object(fields.mapValues { .object(["type": .string($0.typeTag), "value": $0.json]) }),
        ]
        if let t = recordChangeTag { o["recordChangeTag"] = .string(t) }
        if let z = zoneID { o["zoneID"] = z.json }
        for (key, stamp) in [("created", created), ("modified", modified)] {
            guard let stamp else { continue }
            var s: [String: JSONValue] = ["timestamp": .int(stamp.timestamp)]
            if let u = stamp.userRecordName { s["userRecordName"] = .string(u) }
            if let d = stamp.deviceID { s["deviceID"] = .string(d) }
            o[key] = .object(s)
        }
        return .object(o)
    }
}

extension RecordEntry {
    public var json: JSONValue {
        switch self {
        case .record(let r): return r.json
        case .unreadable(let u): return u.json
        case .deleted(let name): return .object(["recordName": .string(name), "deleted": .bool(true)])
        case .error(let e):
            var o: [String: JSONValue] = ["serverErrorCode": .string(e.serverErrorCode)]
            if let n = e.recordName { o["recordName"] = .string(n) }
            if let r = e.reason { o["reason"] = .string(r) }
            if let r = e.retryAfter { o["retryAfter"] = .double(r) }
            if let u = e.uuid { o["uuid"] = .string(u) }
            return .object(o)
        }
    }
}
