// The wire form of a field is `{"value": …, "type": "TAG"}`. Decoding never fails on a value that
// does not match its tag: such a value becomes `.unknown` and is rejected only if a column needs it.

extension FieldValue: Codable {
    enum CodingKeys: String, CodingKey { case value, type }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        let tag = try c.decodeIfPresent(String.self, forKey: .type) ?? "UNKNOWN"
        // The common scalar types decode straight into their Swift type: exact for Int64, and
        // a DOUBLE keeps its sign at -0.0, which a detour through JSONValue (integers first)
        // would lose.
        switch tag {
        case "STRING":
            if let v = try? c.decode(String.self, forKey: .value) {
                self = .string(v)
                return
            }
        case "INT64":
            if let v = try? c.decode(Int64.self, forKey: .value) {
                self = .int64(v)
                return
            }
        case "DOUBLE":
            if let v = try? c.decode(Double.self, forKey: .value) {
                self = .double(v)
                return
            }
        case "TIMESTAMP":
            if let v = try? c.decode(Int64.self, forKey: .value) {
                self = .timestamp(v)
                return
            }
        case "DOUBLE_LIST":
            if let v = try? c.decode([Double].self, forKey: .value) {
                self = .list(tag: tag, v.map(FieldValue.double))
                return
            }
        default:
            break
        }
        let raw = try c.decodeIfPresent(JSONValue.self, forKey: .value) ?? .null
        self = FieldValue(tag: tag, json: raw)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(typeTag, forKey: .type)
        try c.encode(json, forKey: .value)
    }

    /// Interprets a JSON `value` under its type tag.
    public init(tag: String, json: JSONValue) {
        if tag.hasSuffix("_LIST") {
            let elementTag = String(tag.dropLast(5))
            guard case .array(let items) = json else {
                self = .unknown(tag: tag, json)
                return
            }
            var values: [FieldValue] = []
            values.reserveCapacity(items.count)
            for item in items {
                let v = FieldValue(tag: elementTag, json: item)
                if case .unknown = v {
                    self = .unknown(tag: tag, json)
                    return
                }
                values.append(v)
            }
            self = .list(tag: tag, values)
            return
        }
        switch (tag, json) {
        case ("STRING", .string(let s)): self = .string(s)
        case ("INT64", .int(let i)): self = .int64(i)
        case ("INT64", .string(let s)) where Int64(s) != nil: self = .int64(Int64(s)!)
        // A number past a Double's range reads as ±infinity, and a string may spell one or NaN:
        // no DOUBLE CloudKit stores, and no value a column should take (PostgreSQL refuses
        // `1e400` itself, but takes infinity's bits through a binary COPY).
        case ("DOUBLE", .double(let d)) where d.isFinite: self = .double(d)
        case ("DOUBLE", .int(let i)): self = .double(Double(i))
        case ("DOUBLE", .string(let s)) where Double(s)?.isFinite == true: self = .double(Double(s)!)
        case ("TIMESTAMP", .int(let i)): self = .timestamp(i)
        case ("TIMESTAMP", .double(let d)) where d.isFinite && abs(d) < 9e18: self = .timestamp(Int64(d.rounded()))
        case ("BYTES", .string(let s)): self = .bytes(s)
        case ("ENCRYPTED_BYTES", .string(let s)): self = .encryptedBytes(s)
        case ("REFERENCE", .object(let o)):
            guard case .string(let name)? = o["recordName"] else {
                self = .unknown(tag: tag, json)
                return
            }
            var zone: ZoneID?
            if case .object(let z)? = o["zoneID"], case .string(let zoneName)? = z["zoneName"] {
                zone = ZoneID(
                    zoneName: zoneName,
                    ownerRecordName: z["ownerRecordName"]?.stringValue ?? ZoneID.defaultOwner,
                    zoneType: z["zoneType"]?.stringValue)
            }
            self = .reference(Reference(recordName: name, zoneID: zone, action: o["action"]?.stringValue))
        case ("ASSETID", .object), ("ASSET", .object): self = .asset(tag: tag, json)
        case ("LOCATION", .object): self = .location(json)
        default: self = .unknown(tag: tag, json)
        }
    }

    /// The JSON `value` as CloudKit sends it.
    public var json: JSONValue {
        switch self {
        case .string(let s), .bytes(let s), .encryptedBytes(let s): return .string(s)
        case .int64(let i), .timestamp(let i): return .int(i)
        case .double(let d): return .double(d)
        case .reference(let r):
            var o: [String: JSONValue] = ["recordName": .string(r.recordName)]
            if let z = r.zoneID { o["zoneID"] = z.json }
            if let a = r.action { o["action"] = .string(a) }
            return .object(o)
        case .asset(_, let j), .location(let j), .unknown(_, let j): return j
        case .list(_, let items): return .array(items.map(\.json))
        }
    }
}

extension ZoneID {
    public var json: JSONValue {
        var o: [String: JSONValue] = ["zoneName": .string(zoneName), "ownerRecordName": .string(ownerRecordName)]
        if let t = zoneType { o["zoneType"] = .string(t) }
        return .object(o)
    }
}
