// Change pages decoded straight from their bytes into the model, with the same meaning as the
// `Codable` conformances (which stay for everything that is not on the hot path).

extension RecordEntry {
    /// One entry of a `records` array: an error entry (has `serverErrorCode`), a deletion
    /// (`deleted: true`), or a live record, as in `init(from:)`.
    public init(reading json: inout JSONReader) throws {
        var recordName: String?, recordType: String?, changeTag: String?
        var fields: [String: FieldValue] = [:]
        var created: RecordStamp?, modified: RecordStamp?, zoneID: ZoneID?
        var deleted = false
        var serverErrorCode: String?, reason: String?, retryAfter: Double?, uuid: String?
        try json.beginObject()
        while let key = try json.nextKey() {
            if try json.readNullIfPresent() { continue }
            switch key {
            case "recordName": recordName = try json.readString()
            case "recordType": recordType = try json.readString()
            case "recordChangeTag": changeTag = try json.readString()
            case "fields": fields = try Self.readFields(&json)
            case "created": created = try RecordStamp(reading: &json)
            case "modified": modified = try RecordStamp(reading: &json)
            case "zoneID": zoneID = try ZoneID(reading: &json)
            case "deleted": deleted = try json.readBool()
            case "serverErrorCode": serverErrorCode = try json.readString()
            case "reason": reason = try json.readString()
            case "retryAfter": retryAfter = try json.readDouble()
            case "uuid": uuid = try json.readString()
            default: try json.skipValue()
            }
        }
        if let serverErrorCode {
            self = .error(RecordError(recordName: recordName, reason: reason, serverErrorCode: serverErrorCode, retryAfter: retryAfter, uuid: uuid))
        } else if deleted {
            guard let recordName else { throw json.failure("a deleted record without a recordName") }
            self = .deleted(recordName: recordName)
        } else {
            guard let recordName else { throw json.failure("a record without a recordName") }
            guard let recordType else { throw json.failure("a record without a recordType") }
            self = .record(Record(
                recordName: recordName, recordType: recordType, recordChangeTag: changeTag, fields: fields,
                created: created, modified: modified, zoneID: zoneID))
        }
    }

    private static func readFields(_ json: inout JSONReader) throws -> [String: FieldValue] {
        var fields: [String: FieldValue] = [:]
        try json.beginObject()
        while let name = try json.nextKey() {
            fields[name] = try FieldValue(reading: &json)
        }
        return fields
    }
}

extension FieldValue {
    /// `{"value": …, "type": "TAG"}`, either order. Like `init(from:)`, a value that does not
    /// match its tag becomes `.unknown`, never an error.
    public init(reading json: inout JSONReader) throws {
        var tag: String?
        var value: JSONValue = .null
        var negativeZero = false
        try json.beginObject()
        while let key = try json.nextKey() {
            switch key {
            case "type":
                tag = try json.readNullIfPresent() ? nil : try json.readString()
            case "value":
                // Numbers are read here so that a DOUBLE of -0 keeps its sign.
                switch json.peek() ?? 0 {
                case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                    switch try json.readNumber() {
                    case .int(let i): value = .int(i)
                    case .double(let d): value = .double(d)
                    case .negativeZero:
                        value = .int(0)
                        negativeZero = true
                    }
                default:
                    value = try json.readValue()
                }
            default:
                try json.skipValue()
            }
        }
        let type = tag ?? "UNKNOWN"
        if negativeZero && type == "DOUBLE" {
            self = .double(-0.0)
        } else {
            self = FieldValue(tag: type, json: value)
        }
    }
}

extension RecordStamp {
    public init(reading json: inout JSONReader) throws {
        var timestamp: Int64?, user: String?, device: String?
        try json.beginObject()
        while let key = try json.nextKey() {
            if try json.readNullIfPresent() { continue }
            switch key {
            case "timestamp":
                switch try json.readNumber() {
                case .int(let i): timestamp = i
                case .negativeZero: timestamp = 0
                case .double(let d):
                    guard d.isFinite, abs(d) < 9e18 else { throw json.failure("a timestamp out of range") }
                    timestamp = Int64(d.rounded())
                }
            case "userRecordName": user = try json.readString()
            case "deviceID": device = try json.readString()
            default: try json.skipValue()
            }
        }
        guard let timestamp else { throw json.failure("a created or modified stamp without a timestamp") }
        self.init(timestamp: timestamp, userRecordName: user, deviceID: device)
    }
}

extension ZoneID {
    public init(reading json: inout JSONReader) throws {
        var zoneName: String?, owner: String?, zoneType: String?
        try json.beginObject()
        while let key = try json.nextKey() {
            if try json.readNullIfPresent() { continue }
            switch key {
            case "zoneName": zoneName = try json.readString()
            case "ownerRecordName": owner = try json.readString()
            case "zoneType": zoneType = try json.readString()
            default: try json.skipValue()
            }
        }
        guard let zoneName else { throw json.failure("a zoneID without a zoneName") }
        self.init(zoneName: zoneName, ownerRecordName: owner ?? ZoneID.defaultOwner, zoneType: zoneType)
    }
}

extension JSONReader {
    /// A number as a Double (integers converted).
    public mutating func readDouble() throws -> Double {
        switch try readNumber() {
        case .int(let i): return Double(i)
        case .double(let d): return d
        case .negativeZero: return -0.0
        }
    }
}
