// Change pages decoded straight from their bytes into the model, with the same meaning as the
// `Codable` conformances (which stay for everything that is not on the hot path).

extension RecordEntry {
    /// One entry of a `records` array: an error entry (has `serverErrorCode`), a deletion
    /// (`deleted: true`), or a live record, as in `init(from:)`; or, when a name, a field or a
    /// stamp cannot be taken as sent (text that is not UTF-8, a timestamp past Int64's
    /// milliseconds), an unreadable entry that says which.
    public init(reading json: inout JSONReader) throws {
        var recordName: String?
        var recordType: String?
        var changeTag: String?
        var fields = RecordFields.values([:])
        var created: RecordStamp?
        var modified: RecordStamp?
        var zoneID: ZoneID?
        var deleted = false
        var serverErrorCode: String?
        var reason: String?
        var retryAfter: Double?
        var uuid: String?
        var problems: [String] = []
        var badStamps: [String: JSONValue] = [:]
        var nameRepaired = false
        // A member only a live record has, of a shape it cannot have (a zoneID without its
        // name, a change tag that is a number): the entry is of no shape CloudKit sends if it is
        // a live record, and the member is nothing to a deletion or an error entry, as in
        // `init(from:)`, which reads those members for a record alone.
        var recordMemberFailure: JSONReader.Failure?
        var deletedFailure: JSONReader.Failure?
        // Stamps no clock holds: the same, nothing to a deletion.
        var stampProblems: [String] = []
        try json.beginObject()
        var index = 0
        while let member = try json.nextRecordMember(at: index) {
            index += 1
            if try json.readNullIfPresent() { continue }
            let repairs = json.repairedStrings
            let valueStart = json.mark()
            do {
                switch member {
                case .recordName:
                    recordName = try json.readString()
                    nameRepaired = json.repairedStrings != repairs
                case .recordType: recordType = try json.readRecurringString()
                case .recordChangeTag: changeTag = try json.readString()
                case .fields:
                    // Kept as JSON when it can be, and when the reader's bytes may be pointed into.
                    if let page = json.owner, let kept = json.plainFieldsObject(keepingIn: page) {
                        fields = .json(RawFields(page: page, range: kept.range, fields: kept.fields))
                    } else {
                        let start = json.position
                        fields = .values(try Self.readFields(&json, problems: &problems))
                        json.fieldBytesReadIntoModel += json.position - start
                    }
                case .created, .modified:
                    switch try RecordStamp.read(&json) {
                    case .success(let stamp): if member == .created { created = stamp } else { modified = stamp }
                    case .failure(let bad):
                        stampProblems.append("\(member.name).timestamp is \(bad.what), which no timestamp holds")
                        badStamps[member.name] = bad.json
                    }
                case .zoneID: zoneID = try ZoneID(reading: &json)
                case .deleted:
                    // Nothing to an error entry, which `init(from:)` does not read for it.
                    let at = json.mark()
                    do {
                        deleted = try json.readBool()
                    } catch let failure as JSONReader.Failure {
                        json.reset(to: at)
                        try json.skipValue()
                        deletedFailure = failure
                    }
                case .serverErrorCode: serverErrorCode = try json.readString()
                // What an error entry says of itself, besides its code, is read as a failed
                // request's body is: a member of another type (`"reason": 7`) is left out, where it
                // made the whole page malformed, and the zone failed run after run for one odd entry;
                // as `RecordError.init(from:)` reads it.
                case .reason: reason = try json.readValidStringOrPass()
                case .retryAfter: retryAfter = try json.readDoubleOrPass().flatMap { $0.isFinite ? $0 : nil }
                case .uuid: uuid = try json.readValidStringOrPass()
                case .pluginFields, .other: try json.skipValue()
                }
            } catch let failure as JSONReader.Failure where member.belongsToALiveRecordAlone {
                json.reset(to: valueStart)
                try json.skipValue()
                recordMemberFailure = recordMemberFailure ?? failure
            }
            // A reason or uuid that is not valid text is left out, as any odd one is: it is no
            // part of the record, and does not make the entry unreadable.
            if json.repairedStrings != repairs, member != .fields, member != .reason, member != .uuid {
                problems.append("\(member.name) is not valid UTF-8 text")
            }
        }
        if serverErrorCode == nil, let deletedFailure { throw deletedFailure }
        if let serverErrorCode {
            // The server's own complaint about the record: a reject whatever its text.
            self = .error(RecordError(recordName: recordName, reason: reason, serverErrorCode: serverErrorCode, retryAfter: retryAfter, uuid: uuid))
        } else if deleted {
            guard let recordName else { throw json.failure("a deleted record without a recordName") }
            guard problems.isEmpty else {
                self = .unreadable(
                    UnreadableEntry(
                        recordName: recordName, recordType: nil, problem: problems.joined(separator: "; "),
                        json: .object(["recordName": .string(recordName), "deleted": .bool(true)]), nameRepaired: nameRepaired))
                return
            }
            self = .deleted(recordName: recordName)
        } else {
            if let recordMemberFailure { throw recordMemberFailure }
            guard let recordName else { throw json.failure("a record without a recordName") }
            guard let recordType else { throw json.failure("a record without a recordType") }
            // Appended only when there are some: `+=` of an empty array still made a new buffer,
            // about 130 instructions a record (`Benchmarks/run callgrind`).
            if !stampProblems.isEmpty { problems += stampProblems }
            guard problems.isEmpty else {
                let record = Record(
                    recordName: recordName, recordType: recordType, recordChangeTag: changeTag, storedFields: fields,
                    created: created, modified: modified, zoneID: zoneID)
                var raw = record.json
                if case .object(var members) = raw {
                    for (key, value) in badStamps { members[key] = .object(["timestamp": value]) }
                    raw = .object(members)
                }
                self = .unreadable(
                    UnreadableEntry(
                        recordName: recordName, recordType: recordType, problem: problems.joined(separator: "; "), json: raw,
                        nameRepaired: nameRepaired))
                return
            }
            // Made here, at the parts' last use. Made before the check of `problems`, whose
            // branch uses them too, the parts were retained into the record, the record was
            // copied into the entry, and the parts and the record were then released: about
            // 1,000 instructions a record (`Benchmarks/run callgrind`, four runs of each build).
            self = .record(
                Record(
                    recordName: recordName, recordType: recordType, recordChangeTag: changeTag, storedFields: fields,
                    created: created, modified: modified, zoneID: zoneID))
        }
    }

    /// One entry of a `records` array, whatever its shape. Valid JSON that is no entry CloudKit
    /// sends (a record without a `recordName` or `recordType`, `"type": 5`, a field that is not
    /// an object, a timestamp given as text, an entry that is not an object) is an unreadable
    /// entry, a reject: it made its whole page malformed, and its zone failed at that page run
    /// after run for one odd record. JSON that is not valid still fails the page: where the next
    /// entry begins cannot be known.
    ///
    /// `JSONDecoder` (`init(from:)`) still refuses a page with such an entry: it is not how
    /// pages are read, and the page fuzzer holds the two readers to one reading only where both
    /// take a page.
    public static func readAny(_ json: inout JSONReader) throws -> RecordEntry {
        let start = json.mark()
        let (startPosition, modelBytes) = (json.position, json.fieldBytesReadIntoModel)
        do {
            return try RecordEntry(reading: &json)
        } catch let shape as JSONReader.Failure {
            json.reset(to: start)
            let value = try json.readValue()
            // The entry's JSON is held as a tree for the reject, as fields read into the model
            // are, and bounds the batch as they do; what the first reading counted is not.
            json.fieldBytesReadIntoModel = modelBytes + (json.position - startPosition)
            return .unreadable(Self.ofNoKnownShape(value, problem: shape.message))
        }
    }

    /// An entry read whole as JSON, for it is of no shape a change or query page's entry has:
    /// its name and type taken where they are text, for the reject. A name holding U+FFFD may be
    /// one whose bytes were not UTF-8, replaced: it is not taken for the record's (what else of
    /// the entry was repaired says nothing of the name).
    static func ofNoKnownShape(_ value: JSONValue, problem: String) -> UnreadableEntry {
        var members: [String: JSONValue] = [:]
        if case .object(let object) = value { members = object }
        let name = members["recordName"]?.stringValue
        return UnreadableEntry(
            recordName: name, recordType: members["recordType"]?.stringValue, problem: "the entry is not one CloudKit sends (\(problem))",
            json: value, nameRepaired: name?.unicodeScalars.contains("\u{FFFD}") ?? false, ofNoKnownShape: true)
    }

    static func readFields(_ json: inout JSONReader, problems: inout [String]) throws -> [String: FieldValue] {
        // Gathered first so that the dictionary is made once at its size, not grown field by field.
        var read: [(String, FieldValue)] = []
        read.reserveCapacity(16)
        try json.beginObject()
        while true {
            let repairs = json.repairedStrings
            guard let name = try json.nextKey() else { break }
            let nameRepaired = json.repairedStrings != repairs
            read.append((name, try FieldValue(reading: &json)))
            if nameRepaired {
                problems.append("a field name is not valid UTF-8 text")
            } else if json.repairedStrings != repairs {
                problems.append("field \(name) holds text that is not valid UTF-8")
            }
        }
        var fields = [String: FieldValue](minimumCapacity: read.count)
        for (name, value) in read { fields[name] = value }  // a repeated name: the last one wins
        return fields
    }
}

extension FieldValue {
    /// `{"value": …, "type": "TAG"}`, either order. Like `init(from:)`, a value that does not
    /// match its tag becomes `.unknown`, never an error.
    public init(reading json: inout JSONReader) throws {
        // CloudKit sends the value before its type. A string or a number is read at once and
        // given its type afterwards; a list or an object is first only checked and passed, then
        // read again knowing its type, straight into the model. A value of a shape its type does
        // not expect is read as any JSON and interpreted as `init(tag:json:)` does.
        var tag: String?
        var value = PendingValue.none
        try json.beginObject()
        while let key = try json.nextKey() {
            switch key {
            case "type":
                tag = try json.readNullIfPresent() ? nil : try json.readString()
            case "value":
                switch json.peek() {
                case UInt8(ascii: "\"")?: value = .string(try json.readString())
                case UInt8(ascii: "-")?, (UInt8(ascii: "0")...UInt8(ascii: "9"))?: value = .number(try json.readNumber())
                default:
                    // Checked when it is read again.
                    value = .container(json.mark())
                    try json.skipValueLoosely()
                }
            default:
                try json.skipValue()
            }
        }
        let type = tag ?? "UNKNOWN"
        switch value {
        case .none:
            self = FieldValue(tag: type, json: .null)
        case .string(let text):
            switch type {
            case "STRING": self = .string(text)
            case "BYTES": self = .bytes(text)
            case "ENCRYPTED_BYTES": self = .encryptedBytes(text)
            default: self = FieldValue(tag: type, json: .string(text))
            }
        case .number(let number):
            switch (type, number) {
            case ("INT64", .int(let i)): self = .int64(i)
            case ("TIMESTAMP", .int(let i)): self = .timestamp(i)
            case ("DOUBLE", .double(let d)) where d.isFinite: self = .double(d)
            case ("DOUBLE", .int(let i)): self = .double(Double(i))
            // A DOUBLE of -0 keeps its sign.
            case ("DOUBLE", .negativeZero): self = .double(-0.0)
            case (_, .int(let i)): self = FieldValue(tag: type, json: .int(i))
            case (_, .double(let d)): self = FieldValue(tag: type, json: .double(d))
            case (_, .negativeZero): self = FieldValue(tag: type, json: .int(0))
            }
        case .container(let valueAt):
            let end = json.mark()
            defer { json.reset(to: end) }
            json.reset(to: valueAt)
            if let typed = try FieldValue.readTyped(type, &json) {
                self = typed
                return
            }
            json.reset(to: valueAt)
            self = FieldValue(tag: type, json: try json.readValue())
        }
    }

    /// A field's value read before its type.
    private enum PendingValue {
        case none
        case string(String)
        case number(JSONReader.Number)
        /// A list or an object (or `null`, `true`, `false`), to read again from here.
        case container(JSONReader.Mark)
    }

    /// A value of the shape its type expects, or nil (and the reader anywhere inside it).
    private static func readTyped(_ tag: String, _ json: inout JSONReader) throws -> FieldValue? {
        switch tag {
        case "STRING": return try json.peekIsString() ? .string(try json.readString()) : nil
        case "BYTES": return try json.peekIsString() ? .bytes(try json.readString()) : nil
        case "ENCRYPTED_BYTES": return try json.peekIsString() ? .encryptedBytes(try json.readString()) : nil
        case "INT64":
            guard try json.peekIsNumber(), case .int(let i) = try json.readNumber() else { return nil }
            return .int64(i)
        case "TIMESTAMP":
            guard try json.peekIsNumber(), case .int(let i) = try json.readNumber() else { return nil }
            return .timestamp(i)
        case "DOUBLE":
            guard try json.peekIsNumber() else { return nil }
            switch try json.readNumber() {
            case .double(let d): return d.isFinite ? .double(d) : nil
            case .int(let i): return .double(Double(i))
            case .negativeZero: return .double(-0.0)
            }
        case "REFERENCE":
            return try readReference(&json).map(FieldValue.reference)
        case "STRING_LIST", "BYTES_LIST", "ENCRYPTED_BYTES_LIST", "INT64_LIST", "TIMESTAMP_LIST", "DOUBLE_LIST", "REFERENCE_LIST":
            guard json.peek() == UInt8(ascii: "[") else { return nil }
            let element = String(tag.dropLast(5))
            var items: [FieldValue] = []
            try json.beginArray()
            while try json.nextElement() {
                guard let item = try readTyped(element, &json) else { return nil }
                items.append(item)
            }
            return .list(tag: tag, items)
        default:
            return nil
        }
    }

    /// `{"recordName": …, "zoneID": {…}, "action": …}` with strings where strings belong, or nil.
    private static func readReference(_ json: inout JSONReader) throws -> Reference? {
        guard json.peek() == UInt8(ascii: "{") else { return nil }
        var name: String?
        var zone: ZoneID?
        var action: String?
        try json.beginObject()
        while let key = try json.nextKey() {
            switch key {
            case "recordName":
                guard try json.peekIsString() else { return nil }
                name = try json.readString()
            case "action":
                guard try json.peekIsString() else { return nil }
                action = try json.readString()
            case "zoneID":
                guard json.peek() == UInt8(ascii: "{") else { return nil }
                var zoneName: String?
                var owner: String?
                var zoneType: String?
                try json.beginObject()
                while let zoneKey = try json.nextKey() {
                    switch zoneKey {
                    case "zoneName", "ownerRecordName", "zoneType":
                        guard try json.peekIsString() else { return nil }
                        let text = try json.readString()
                        if zoneKey == "zoneName" { zoneName = text } else if zoneKey == "zoneType" { zoneType = text } else { owner = text }
                    default:
                        try json.skipValue()
                    }
                }
                guard let zoneName else { return nil }
                zone = ZoneID(zoneName: zoneName, ownerRecordName: owner ?? ZoneID.defaultOwner, zoneType: zoneType)
            default:
                try json.skipValue()
            }
        }
        guard let name else { return nil }
        return Reference(recordName: name, zoneID: zone, action: action)
    }
}

extension RecordStamp {
    public init(reading json: inout JSONReader) throws {
        switch try Self.read(&json) {
        case .success(let stamp): self = stamp
        case .failure(let bad): throw json.failure("a timestamp out of range (\(bad.what))")
        }
    }

    /// A stamp whose timestamp no Int64 of milliseconds holds (1e19, 1e300, -1e30): what it
    /// was, for the entry's reject.
    struct OutOfRange: Error {
        var what: String
        var json: JSONValue
    }

    /// The stamp, or, when its timestamp is out of range, what it was: a record is then
    /// rejected, not the page it came in.
    static func read(_ json: inout JSONReader) throws -> Result<RecordStamp, OutOfRange> {
        // A page's stamps differ in their timestamps and name a few users and devices, in the
        // same bytes: a stamp is compared with those read before but for its timestamp's digits.
        if let stamp = json.recurringStamp() { return .success(stamp) }
        let start = json.valueStart()
        let repairs = json.repairedStrings
        // Where the timestamp's number is, while the stamp can be remembered: one timestamp, an
        // integer, and no member but a user and a device.
        var digits: Range<Int>?
        var rememberable = true
        var timestamp: Int64?
        var outOfRange: OutOfRange?
        var user: String?
        var device: String?
        try json.beginObject()
        while let key = try json.nextKeyName() {
            if try json.readNullIfPresent() {
                if !key.is("userRecordName") && !key.is("deviceID") { rememberable = false }
                continue
            }
            if key.is("timestamp") {
                let numberStart = json.valueStart()
                let number = try json.readNumber()
                if case .int = number, timestamp == nil, outOfRange == nil {
                    digits = numberStart..<json.position
                } else {
                    rememberable = false
                }
                switch number {
                case .int(let i): timestamp = i
                case .negativeZero: timestamp = 0
                case .double(let d):
                    if d.isFinite, abs(d) < 9e18 {
                        timestamp = Int64(d.rounded())
                    } else {
                        outOfRange = OutOfRange(what: d.isFinite ? "\(d) ms" : "a number past any range", json: d.isFinite ? .double(d) : .null)
                    }
                }
            } else if key.is("userRecordName") {
                user = try json.readRecurringString()
            } else if key.is("deviceID") {
                device = try json.readRecurringString()
            } else {
                rememberable = false
                try json.skipValue()
            }
        }
        if let outOfRange { return .failure(outOfRange) }
        guard let timestamp else { throw json.failure("a created or modified stamp without a timestamp") }
        // Text that was repaired is read again each time, so that each record with it is
        // unreadable, as the first was.
        if rememberable, let digits, json.repairedStrings == repairs { json.rememberStamp(from: start, number: digits, user: user, device: device) }
        return .success(RecordStamp(timestamp: timestamp, userRecordName: user, deviceID: device))
    }
}

extension ZoneID {
    public init(reading json: inout JSONReader) throws {
        // A page's records name their zone in the same bytes, record after record: 3.5% of the
        // instructions of reading and writing one (`Benchmarks/`) went to reading it again.
        if let zone = json.recurringZone() {
            self = zone
            return
        }
        let start = json.valueStart()
        let repairs = json.repairedStrings
        var zoneName: String?
        var owner: String?
        var zoneType: String?
        try json.beginObject()
        while let key = try json.nextKeyName() {
            if try json.readNullIfPresent() { continue }
            if key.is("zoneName") {
                zoneName = try json.readRecurringString()
            } else if key.is("ownerRecordName") {
                owner = try json.readRecurringString()
            } else if key.is("zoneType") {
                zoneType = try json.readRecurringString()
            } else {
                try json.skipValue()
            }
        }
        guard let zoneName else { throw json.failure("a zoneID without a zoneName") }
        self.init(zoneName: zoneName, ownerRecordName: owner ?? ZoneID.defaultOwner, zoneType: zoneType)
        // Text that was repaired is read again each time, so that each reading counts its repair.
        if json.repairedStrings == repairs { json.rememberZone(self, from: start) }
    }
}

extension JSONReader {
    /// The next value if it is a number; any other value is passed, and nil.
    mutating func readDoubleOrPass() throws -> Double? {
        guard try peekIsNumber() else {
            try skipValue()
            return nil
        }
        return try readDouble()
    }

    /// The next value if it is a string of valid UTF-8 text; any other value, and text that
    /// would have to be repaired, is passed, and nil (as `try? decodeIfPresent(String.self…)`
    /// reads it).
    public mutating func readValidStringOrPass() throws -> String? {
        let repairs = repairedStrings
        let text = try readStringOrPass()
        return repairedStrings == repairs ? text : nil
    }

    /// A number as a Double (integers converted).
    public mutating func readDouble() throws -> Double {
        switch try readNumber() {
        case .int(let i): return Double(i)
        case .double(let d): return d
        case .negativeZero: return -0.0
        }
    }
}
