import CloudKitModel
import LibPQ
import ZoneFeed

// Fields kept as the page's JSON (`RawFields`) go into the row straight from its bytes: the
// common pairs of CloudKit type and column type are written without making a `FieldValue` or a
// String; any other pair, and any value that is not of the plain shape its type has, is read
// into the model and written by `append(_:as:)`, so each value goes where it went before and is
// refused with the same words. Unmapped fields are copied into the `fields` column as the JSON
// they came in.

extension RowEncoder {
    /// The fields of one row, straight from their JSON; throws only for JSON that was not checked
    /// when it was kept (the caller then reads it into the model).
    mutating func appendFields(of raw: RawFields) throws -> String? {
        try withExtendedLifetime(raw.page) { try appendFields(of: raw, in: raw.page.buffer) }
    }

    /// `appendFields(of:)`, with the page's bytes kept alive by the caller.
    private mutating func appendFields(of raw: RawFields, in page: UnsafeBufferPointer<UInt8>) throws -> String? {
        for i in fieldSlots.indices { fieldSlots[i].start = -1 }
        unmappedMembers.removeAll(keepingCapacity: true)
        // Fields evolution would give a column, by name: where each one's (last) object starts.
        var candidates: [String: Int] = [:]
        // The check that kept the fields found each one's name, object, value and type: one
        // pass over what it found sorts them into columns, without reading the JSON again.
        var cursor = FieldNameTable.Cursor()
        for field in raw.fields {
            let name = UnsafeBufferPointer(rebasing: page[Int(field.name.lowerBound)..<Int(field.name.upperBound)])
            let use = names.value(for: name, after: &cursor) ?? learn(name)
            if use >= 0 {
                // A name given twice: the last one counts.
                fieldSlots[use] = FieldSlot(
                    start: Int(field.objectStart), valueAt: Int(field.value), objectKeptUpTo: Int(field.objectKeptUpTo),
                    stringEnd: Int(field.stringEnd), stringEscaped: field.stringEscaped,
                    tag: FieldTag(field.tag.map { UnsafeBufferPointer(rebasing: page[Int($0.lowerBound)..<Int($0.upperBound)]) }))
                continue
            }
            if use == Self.unmappedColumnCandidate {
                // Noted after the pass: of a name given twice, the last object's type counts.
                candidates[String(decoding: name, as: UTF8.self)] = Int(field.objectStart)
            }
            // The member as it came, from the quote before its name to its closing brace.
            if keepUnmapped { unmappedMembers.append(Int(field.name.lowerBound) - 1..<Int(field.objectEnd)) }
        }
        for (name, objectStart) in candidates {
            var field = JSONReader(page, at: objectStart)
            noteIfNew(name, typeTag: (try? FieldValue(reading: &field).typeTag) ?? "UNKNOWN")
        }
        // One reader for the row's values, started again at each (see `JSONReader.restart`).
        var reader = JSONReader(page)
        for i in fieldSlots.indices {
            guard fieldSlots[i].start >= 0 else {
                buffer.appendNull()
                continue
            }
            if let problem = try appendColumn(from: page, fieldSlots[i], column: i, reader: &reader) { return problem }
        }
        guard keepUnmapped else {
            buffer.appendNull()
            return nil
        }
        // jsonb's binary form: a version byte and the text. The members were checked when they
        // were kept: no NUL, valid UTF-8, numbers jsonb takes. Measured first and written into
        // room made once: piece by piece, each piece's room was a check of the buffer's memory
        // (`Benchmarks/`: about 100 instructions a record).
        let length = unmappedMembers.reduce(3 + max(0, unmappedMembers.count - 1)) { $0 + $1.count }
        if length - 1 > jsonb.maxBytes { return fieldsColumn(jsonb.tooLong) }
        let start = buffer.count
        _ = buffer.appendField(atMost: length) { room in
            let at = room.baseAddress!
            at[0] = 1
            at[1] = UInt8(ascii: "{")
            var written = 2
            for (i, member) in unmappedMembers.enumerated() {
                if i > 0 {
                    at[written] = UInt8(ascii: ",")
                    written += 1
                }
                (at + written).initialize(from: page.baseAddress! + member.lowerBound, count: member.count)
                written += member.count
            }
            at[written] = UInt8(ascii: "}")
            return written + 1
        }
        // Text longer than any that always fits is looked through, as written (after the
        // field's length word and the version byte), for what jsonb would refuse.
        if length - 1 > jsonb.alwaysFits,
            let problem = buffer.withUnsafeBytes({ jsonb.problem(with: UnsafeBufferPointer(rebasing: $0[(start + 5)...])) })
        {
            buffer.truncate(to: start)
            return fieldsColumn(problem)
        }
        return nil
    }

    /// An unmapped name that evolution would give a column.
    static let unmappedColumnCandidate = -2
    /// An unmapped name that stays unmapped.
    static let unmapped = -1

    /// What to do with a name not met before, remembered.
    private mutating func learn(_ name: UnsafeBufferPointer<UInt8>) -> Int {
        let use = wouldBeAColumn(String(decoding: name, as: UTF8.self)) ? Self.unmappedColumnCandidate : Self.unmapped
        names.insert(name, value: use)
        return use
    }

    /// A mapped field of one row: where its object and its value start, and its type.
    struct FieldSlot {
        var start = -1
        var valueAt = -1
        var objectKeptUpTo = -1
        var stringEnd = -1
        var stringEscaped = false
        /// Where the value's closing quote is when it is a string without an escape; -1 otherwise.
        var plainStringEnd: Int { stringEscaped ? -1 : stringEnd }
        var tag = FieldTag.unknown
    }

    /// A mapped field's value into its column (the mapping's `column`th).
    private mutating func appendColumn(
        from page: UnsafeBufferPointer<UInt8>, _ slot: FieldSlot, column i: Int, reader value: inout JSONReader
    ) throws -> String? {
        let fieldStart = buffer.count
        // A column made by evolution takes only its type; the model says why another does not fit.
        if slot.valueAt >= 0, slot.tag != .other, columnsMadeFor[i].map({ $0 == slot.tag }) ?? true {
            value.restart(at: slot.valueAt)
            do {
                if try appendPlain(&value, slot, as: columnTypes[i]) {
                    return nil
                }
            } catch let tooLarge as TooLarge {
                // Said as the model says it, without reading the value into the model.
                return fieldProblem(tooLarge.problem, column: i)
            }
            buffer.truncate(to: fieldStart)
        }
        // Any other pair, or a value not of its type's plain shape: as a value of the model.
        valuesFromTheModel += 1
        var whole = JSONReader(page, at: slot.start)
        return appendColumn(try FieldValue(reading: &whole), column: i)
    }

    /// Writes the value when it is of a pair written straight from JSON; false (with whatever
    /// was written to be taken back) when it is not, or when it does not fit: the model then
    /// writes it or says why not. What the check found of the field (`slot`) spares looking again.
    private mutating func appendPlain(_ json: inout JSONReader, _ slot: FieldSlot, as column: ColumnType) throws -> Bool {
        switch (column, slot.tag) {
        case (.text, .string):
            guard slot.stringEnd >= 0 else { return false }
            // Its end known from the check: a string without escapes is copied without scanning
            // it again (500 fewer instructions a record of the bench's, `Benchmarks/run
            // callgrind`), and one with escapes undone in one pass.
            appendText((json.bytes(in: slot.valueAt + 1..<slot.stringEnd), slot.stringEscaped))
        case (.text, .reference):
            guard let name = try Self.referenceName(&json) else { return false }
            appendText(name)
        case (.bigint, .int64):
            guard case .int(let i)? = try Self.number(&json) else { return false }
            buffer.append(bigint: i)
        case (.doublePrecision, .double):
            guard let d = try Self.double(&json) else { return false }
            buffer.append(double: d)
        case (.doublePrecision, .int64):
            // Past 2^53 (no double of its own): the model's way says why it is a reject.
            guard case .int(let i)? = try Self.number(&json), let d = Double(exactly: i) else { return false }
            buffer.append(double: d)
        case (.timestamptz, .timestamp):
            guard case .int(let ms)? = try Self.number(&json), let micros = Self.postgresMicroseconds(ms) else { return false }
            buffer.append(timestampMicroseconds: micros)
        case (.bytea, .bytes), (.bytea, .encryptedBytes):
            guard slot.plainStringEnd >= 0 else { return try appendBytes(&json) }
            return appendBase64(json.bytes(in: slot.valueAt + 1..<slot.plainStringEnd))
        case (.boolean, .int64):
            guard case .int(let i)? = try Self.number(&json), i == 0 || i == 1 else { return false }
            buffer.append(boolean: i == 1)
        case (.jsonb, .assetID), (.jsonb, .asset), (.jsonb, .location):
            // The object as it came, when the check found that the model would write the same
            // JSON but for the form of its numbers (1E2 as 100.0, the same number to jsonb);
            // otherwise the model's. (Walking the object again here was 6.7% of the
            // micro-benchmark's instructions.)
            guard slot.objectKeptUpTo >= 0 else { return false }
            try appendJSONB(json.bytes(in: slot.valueAt..<slot.objectKeptUpTo))
        case (.jsonb, .string):
            if slot.stringEnd >= 0 {
                // The string as it came, escapes and all: jsonb reads them.
                try appendJSONB(json.bytes(in: slot.valueAt..<slot.stringEnd + 1))
                break
            }
            guard json.peek() == UInt8(ascii: "\"") else { return false }
            try appendJSONB(try json.readValueBytes())
        case (.jsonb, .int64), (.jsonb, .timestamp):
            let start = json.valueStart()
            guard case .int? = try Self.number(&json) else { return false }
            try appendJSONB(json.bytes(since: start))
        case (.textArray, .stringList):
            return try appendArray(&json, oid: BinaryCopyBuffer.OID.text) { encoder, json in try encoder.appendText(&json) }
        case (.textArray, .referenceList):
            return try appendArray(&json, oid: BinaryCopyBuffer.OID.text) { encoder, json in
                guard let name = try Self.referenceName(&json) else { return false }
                encoder.appendText(name)
                return true
            }
        case (.bigintArray, .int64List):
            return try appendArray(&json, oid: BinaryCopyBuffer.OID.int8) { encoder, json in
                guard case .int(let i)? = try Self.number(&json) else { return false }
                encoder.buffer.append(bigint: i)
                return true
            }
        case (.doublePrecisionArray, .doubleList):
            return try appendArray(&json, oid: BinaryCopyBuffer.OID.float8) { encoder, json in
                guard let d = try Self.double(&json) else { return false }
                encoder.buffer.append(double: d)
                return true
            }
        case (.timestamptzArray, .timestampList):
            return try appendArray(&json, oid: BinaryCopyBuffer.OID.timestamptz) { encoder, json in
                guard case .int(let ms)? = try Self.number(&json), let micros = Self.postgresMicroseconds(ms) else { return false }
                encoder.buffer.append(timestampMicroseconds: micros)
                return true
            }
        case (.byteaArray, .bytesList), (.byteaArray, .encryptedBytesList):
            return try appendArray(&json, oid: BinaryCopyBuffer.OID.bytea) { encoder, json in try encoder.appendBytes(&json) }
        default:
            return false
        }
        return true
    }

    // MARK: Values

    /// A number, when the value is one.
    private static func number(_ json: inout JSONReader) throws -> JSONReader.Number? {
        try json.peekIsNumber() ? try json.readNumber() : nil
    }

    /// A DOUBLE's number as the model reads it: integers converted, -0 kept; nil past a
    /// Double's range, which the model refuses.
    private static func double(_ json: inout JSONReader) throws -> Double? {
        switch try number(&json) {
        case .int(let i)?: return Double(i)
        case .double(let d)?: return d.isFinite ? d : nil
        case .negativeZero?: return -0.0
        case nil: return nil
        }
    }

    /// A string into a text field; false when the value is not a string.
    private mutating func appendText(_ json: inout JSONReader) throws -> Bool {
        guard json.peek() == UInt8(ascii: "\"") else { return false }
        appendText(try json.readStringToken())
        return true
    }

    /// A base64 string into a bytea field; false for one with escapes (the model undoes them)
    /// or that is not base64.
    private mutating func appendBytes(_ json: inout JSONReader) throws -> Bool {
        guard json.peek() == UInt8(ascii: "\"") else { return false }
        let (text, escaped) = try json.readStringToken()
        guard !escaped else { return false }
        return appendBase64(text)
    }

    /// A checked string's bytes between its quotes into a text field: as they are, or with their
    /// escapes undone into the row's room.
    private mutating func appendText(_ string: JSONReader.StringToken) {
        guard string.escaped else {
            buffer.appendField(string.bytes)
            return
        }
        _ = buffer.appendField(atMost: string.bytes.count) { JSONReader.unescapeChecked(string.bytes, into: $0.baseAddress!) }
    }

    /// Base64 text without escapes into a bytea field; false when it is not base64.
    private mutating func appendBase64(_ text: UnsafeBufferPointer<UInt8>) -> Bool {
        buffer.appendField(atMost: Base64.maxDecodedCount(text.count)) { Base64.decode(text, into: $0) }
    }

    /// jsonb's binary form: a version byte (1) and the text.
    private mutating func appendJSONB(_ text: UnsafeBufferPointer<UInt8>) throws {
        if let problem = jsonb.problem(with: text) { throw TooLarge(problem: problem) }
        buffer.appendField(prefix: 1, text)
    }

    /// A one-dimensional array of the elements `element` writes; false when one does not fit.
    private mutating func appendArray(
        _ json: inout JSONReader, oid: Int32, _ element: (inout RowEncoder, inout JSONReader) throws -> Bool
    ) throws -> Bool {
        guard json.peek() == UInt8(ascii: "[") else { return false }
        let start = buffer.beginArrayField(elementOID: oid)
        var count: Int32 = 0
        var memory = 0
        try json.beginArray()
        while try json.nextElement() {
            let before = buffer.count
            guard try element(&self, &json) else { return false }
            count += 1
            // Stopped as soon as it passes a limit: a list of numbers grows sixfold here.
            if buffer.count - rowStart > maxRowBytes { throw TooLarge(problem: rowTooLarge) }
            if !Self.arrayFits(count: Int(count), memory: &memory, elementBytes: buffer.count - before, maxElements: maxArrayElements, maxBytes: maxRowBytes) {
                throw TooLarge(problem: arrayTooLarge)
            }
        }
        if count == 0 {
            buffer.truncate(to: start)
            buffer.appendEmptyArrayField(elementOID: oid)
        } else {
            buffer.endArrayField(at: start, count: count)
        }
        return true
    }

    /// A REFERENCE's `recordName` string (its bytes between its quotes, and whether it has an
    /// escape), when the model would read the value as a reference (`FieldValue.readReference`):
    /// an object with a string `recordName`, a string `action` if any, and a `zoneID` object if
    /// any with a string `zoneName` and strings for its other names. Nil otherwise.
    private static func referenceName(_ json: inout JSONReader) throws -> JSONReader.StringToken? {
        guard json.peek() == UInt8(ascii: "{") else { return nil }
        if let name = try json.cloudKitsReferenceName() { return name }
        var name: JSONReader.StringToken?
        try json.beginObject()
        while let key = try json.nextKeyBytes() {
            if JSONReader.equal(key, "recordName") || JSONReader.equal(key, "action") {
                guard try json.peekIsString() else { return nil }
                if JSONReader.equal(key, "recordName") { name = try json.readStringToken() } else { try json.skipString() }
            } else if JSONReader.equal(key, "zoneID") {
                guard json.peek() == UInt8(ascii: "{") else { return nil }
                var zoneName = false
                try json.beginObject()
                while let zoneKey = try json.nextKeyBytes() {
                    let isZoneName = JSONReader.equal(zoneKey, "zoneName")
                    if isZoneName || JSONReader.equal(zoneKey, "ownerRecordName") || JSONReader.equal(zoneKey, "zoneType") {
                        guard try json.peekIsString() else { return nil }
                        try json.skipString()
                        zoneName = zoneName || isZoneName
                    } else {
                        try json.skipValue()
                    }
                }
                guard zoneName else { return nil }
            } else {
                try json.skipValue()
            }
        }
        return name
    }
}
