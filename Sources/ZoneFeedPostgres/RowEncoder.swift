import CloudKitModel
import LibPQ
import ZoneFeed

/// Encodes records of one record type into a binary COPY stream. Encoding is also the
/// validation: a value that does not fit its column stops the row, the row's bytes are taken
/// back, and the reason comes back as a sentence naming the field and column (never the value).
///
/// Rows come in two shapes that share everything after their first fields: rows for the staging
/// table start with the entry's position in the batch (`seq`), rows
/// copied straight into the record type's table start with the zone, run and generation, the
/// same for the whole batch and so encoded once (`PostgresSchema.directColumns`).
public struct RowEncoder {
    /// Why an INT64 is not written into a double precision column: it has no double of its own
    /// (past 2^53 doubles skip integers), and would be stored as another number.
    static let int64PastDouble =
        "the INT64 value has no double precision of its own (past 2^53 doubles skip integers) and would be stored as another number: "
        + "map the field to bigint"

    let mapping: PostgresRecordTypeMapping
    /// The mapping's index of each mapped field.
    let columnOf: [String: Int]
    let keepUnmapped: Bool
    /// Each mapped field's column type, and the CloudKit type a column made by evolution takes
    /// (nil: any that fits), in column order: read for every field of every row, where copying
    /// the field's whole mapping cost a retain and a release of its names each time.
    let columnTypes: [ColumnType]
    let columnsMadeFor: [FieldTag?]
    /// Whether fields without a column are noted in `newFields` (`schemaEvolution: evolve`).
    let evolving: Bool
    /// The fields met since the rows were begun that have no column and are not left out
    /// on purpose, with their first values' type tags, when evolving.
    public internal(set) var newFields: [(name: String, typeTag: String)] = []
    var newFieldNames: Set<String> = []
    /// Per row, reused: the mapped fields' values in column order, and the unmapped fields.
    private var columnValues: [FieldValue?]
    private var unmapped: [(String, FieldValue)] = []
    /// For fields kept as JSON (`RowEncoder+FieldsJSON`): names to columns (or to how an unmapped
    /// name is treated), per row each mapped field's place and type, and the unmapped members.
    var names = FieldNameTable()
    var fieldSlots: [FieldSlot]
    var unmappedMembers: [Range<Int>] = []
    var buffer = BinaryCopyBuffer()
    public private(set) var rowCount = 0
    /// How many values of fields kept as JSON were written by way of the model, being of a pair
    /// of types or a shape the straight path leaves to it (`RowEncoder+FieldsJSON`).
    public internal(set) var valuesFromTheModel = 0
    var json = JSONWriter(capacity: 1024)
    /// The direct shape's leading fields, already encoded; nil for the staging shape.
    private var directPrefix: [UInt8]?
    /// The most bytes a row may take in PostgreSQL's binary form: the server forms a row in one
    /// allocation of at most 1 GB - 1 (`MaxAllocSize`), which bounds each value too. A list of
    /// numbers grows about sixfold from its JSON (`1,` to a length word and eight bytes), so a
    /// response allowed past about 180 MB (`maxResponseBytes`) can hold a record past it, and
    /// past 2 GB a list's length would not fit its 32 bits at all. Such a record is a reject,
    /// stopped as soon as it passes the mark, rather than a COPY the server refuses batch after
    /// batch. Lowered by tests.
    var maxRowBytes = (1 << 30) - 1
    /// The most elements a PostgreSQL array holds (`MaxArraySize`); the server also refuses an
    /// array whose elements take more than `maxRowBytes` in its memory, where a text or bytea
    /// element takes its bytes and a 4-byte header, rounded up to 4 (`ReadArrayBinary`): a
    /// list of one-letter strings is 4 bytes an element in JSON (`"a",`) and 8 there. Lowered
    /// by tests.
    var maxArrayElements = 134_217_727
    /// What a jsonb value or the fields column may hold. Lowered by tests.
    var jsonb = JSONBLimits()
    /// Where the row being encoded starts in the buffer.
    private(set) var rowStart = 0
    private var fieldCount: Int

    public init(mapping: PostgresRecordTypeMapping, keepUnmapped: Bool, evolving: Bool = false) {
        self.mapping = mapping
        self.keepUnmapped = keepUnmapped
        // A table at the most columns evolution gives one takes no more: fields past it are
        // unmapped, like those of a frozen mapping.
        self.evolving = evolving && mapping.fields.count < PostgresRecordTypeMapping.maxEvolvedColumns
        var columnOf: [String: Int] = [:]
        for (i, field) in mapping.fields.enumerated() { columnOf[field.field] = i }
        self.columnOf = columnOf
        columnTypes = mapping.fields.map(\.type)
        columnsMadeFor = mapping.fields.map { $0.cloudKitType.map { FieldTag(rawValue: $0) ?? .other } }
        columnValues = Array(repeating: nil, count: mapping.fields.count)
        fieldSlots = Array(repeating: FieldSlot(), count: mapping.fields.count)
        for (i, field) in mapping.fields.enumerated() { names.insert(field.field.utf8, value: i) }
        json.sortsKeys = false  // jsonb keeps its own order
        fieldCount = 1 + Self.dataFieldCount(mapping)
    }

    /// record_name … modified_by, the mapped columns, fields.
    static func dataFieldCount(_ mapping: PostgresRecordTypeMapping) -> Int { 7 + mapping.fields.count + 1 }

    /// Empties the buffer for a batch of staging-shaped rows.
    mutating func beginStagingRows() {
        directPrefix = nil
        fieldCount = 1 + Self.dataFieldCount(mapping)
        reset()
    }

    /// Empties the buffer for a batch of rows for the table itself.
    public mutating func beginDirectRows(zone: ZoneID, runID: Int64, generation: Int) {
        var prefix = BinaryCopyBuffer(capacity: 128)
        let headerLength = prefix.count
        prefix.append(text: zone.ownerRecordName)
        prefix.append(text: zone.zoneName)
        prefix.append(bigint: runID)
        prefix.append(integer: Int32(generation))
        directPrefix = Array(prefix.bytes[headerLength...])
        fieldCount = 4 + Self.dataFieldCount(mapping)
        reset()
    }

    mutating func reset() {
        buffer.reset()
        rowCount = 0
        newFields.removeAll()
        newFieldNames.removeAll()
    }

    /// The bytes encoded and not yet sent.
    var pendingByteCount: Int { buffer.count }

    /// Sends what is encoded so far (with the stream's header, the first time) and forgets it.
    mutating func send(to writer: CopyInWriter) throws {
        try buffer.withUnsafeBytes { try writer.write($0) }
        buffer.removeAll()
    }

    /// Ends the stream and sends the rest; the encoder must be begun again before more rows.
    mutating func sendEnd(to writer: CopyInWriter) throws {
        buffer.finish()
        try send(to: writer)
    }

    /// The finished COPY stream; the encoder must be begun again before more rows.
    public mutating func finish() -> [UInt8] {
        buffer.finish()
        return buffer.bytes
    }

    /// Appends a row; returns why it cannot be applied instead, leaving the buffer as it was.
    public mutating func append(_ record: Record, seq: Int32) -> String? {
        rowStart = buffer.count
        var problem = encode(record, seq: seq)
        if problem == nil, buffer.count - rowStart > maxRowBytes { problem = rowTooLarge }
        if let problem {
            buffer.truncate(to: rowStart)
            return problem
        }
        rowCount += 1
        return nil
    }

    /// Why a record past `maxRowBytes` is refused.
    var rowTooLarge: String {
        "the record takes more than \(maxRowBytes.grouped) bytes as a row, more than PostgreSQL takes in one"
    }

    /// Why a list past `maxArrayElements`, or past `maxRowBytes` in the server's memory, is
    /// refused.
    var arrayTooLarge: String {
        "the list is larger than a PostgreSQL array can be (\(maxArrayElements.grouped) elements, \(maxRowBytes.grouped) bytes)"
    }

    /// Why the fields without a column are refused when jsonb would not take them together.
    func fieldsColumn(_ problem: String) -> String { "the fields without a column: \(problem) (the fields column)" }

    /// A list or a jsonb value stopped part way: why, in `problem` (one of the sentences above).
    struct TooLarge: Error {
        var problem: String
    }

    /// Adds to `memory`, an array's size in the server's memory, one more element of
    /// `elementBytes` in COPY's form (its length word and its bytes); whether the array of
    /// `count` elements is still within PostgreSQL's limits. The row's own is checked beside it.
    @inline(__always) static func arrayFits(count: Int, memory: inout Int, elementBytes: Int, maxElements: Int, maxBytes: Int) -> Bool {
        memory += (elementBytes + 3) & ~3
        return count <= maxElements && memory <= maxBytes
    }

    private mutating func encode(_ record: Record, seq: Int32) -> String? {
        buffer.beginTuple(fieldCount: fieldCount)
        if let directPrefix {
            buffer.append(contentsOf: directPrefix)
        } else {
            buffer.append(integer: seq)
        }
        // A refused record's row is taken back by the caller (`append(_:seq:)`).
        guard appendTextWithoutNUL(record.recordName) else { return "the record name contains a NUL byte, which PostgreSQL text cannot hold" }
        guard appendTextWithoutNUL(record.recordType) else { return "the record type contains a NUL byte, which PostgreSQL text cannot hold" }
        if let problem = appendMetaText(record.recordChangeTag, "recordChangeTag") { return problem }
        if let problem = appendTimestamp(record.created?.timestamp, "created.timestamp") { return problem }
        if let problem = appendTimestamp(record.modified?.timestamp, "modified.timestamp") { return problem }
        if let problem = appendMetaText(record.created?.userRecordName, "created.userRecordName") { return problem }
        if let problem = appendMetaText(record.modified?.userRecordName, "modified.userRecordName") { return problem }
        switch record.storedFields {
        case .values(let values):
            return appendFields(values)
        case .json(let raw):
            let fieldsStart = buffer.count
            let (noted, fromTheModel) = (newFields.count, valuesFromTheModel)
            do {
                return try appendFields(of: raw)
            } catch {
                // Cannot happen to JSON checked (or written plain) when it was kept; if it did,
                // the fields are read into the model, which says what is wrong with them, from
                // where the attempt began.
                buffer.truncate(to: fieldsStart)
                // A name is noted in both at once (`noteIfNew`): those of the attempt go.
                for field in newFields[noted...] { newFieldNames.remove(field.name) }
                newFields.removeSubrange(noted...)
                valuesFromTheModel = fromTheModel
                return appendFields(raw.values)
            }
        }
    }

    /// Fields in the model: one pass over them sorts them into their columns and the unmapped
    /// rest, a hash per field, where looking each column up and each field up again would take
    /// two.
    private mutating func appendFields(_ values: [String: FieldValue]) -> String? {
        for i in columnValues.indices { columnValues[i] = nil }
        unmapped.removeAll(keepingCapacity: true)
        for (name, value) in values {
            if let column = columnOf[name] {
                columnValues[column] = value
            } else {
                noteIfNew(name, typeTag: value.typeTag)
                if keepUnmapped { unmapped.append((name, value)) }
            }
        }
        for i in columnValues.indices {
            guard let value = columnValues[i] else {
                buffer.appendNull()
                continue
            }
            if let problem = appendColumn(value, column: i) { return problem }
        }
        return appendUnmappedFields()
    }

    /// Whether a field without a column is one evolution would give a column.
    func wouldBeAColumn(_ name: String) -> Bool {
        evolving && SchemaGrowth.canBeAColumn(name) && !mapping.omittedFields.contains(name)
    }

    /// Notes a field without a column that evolution would give one, once per batch.
    mutating func noteIfNew(_ name: String, typeTag: @autoclosure () -> String) {
        guard wouldBeAColumn(name), !newFieldNames.contains(name) else { return }
        let tag = typeTag()
        // Kept in `fields`: a later value of the field may say its type.
        guard SchemaGrowth.saysAType(tag) else { return }
        newFieldNames.insert(name)
        newFields.append((name, tag))
    }

    /// One mapped field's value into its column (the mapping's `column`th), or why it does not fit.
    mutating func appendColumn(_ value: FieldValue, column i: Int) -> String? {
        // A column made by evolution takes only the CloudKit type it was made for: a LOCATION
        // column (jsonb) would take a STRING, a DOUBLE one an INT64, without a word.
        if columnsMadeFor[i] != nil, let made = mapping.fields[i].cloudKitType, !SchemaGrowth.columnMade(for: made, takes: value) {
            let field = mapping.fields[i]
            return
                "field \(field.field): \(Self.aValue(of: value.typeTag)) cannot go into this column (column \(field.column), \(field.type.rawValue), made for \(made) values)"
        }
        if let problem = append(value, as: columnTypes[i]) { return fieldProblem(problem, column: i) }
        return nil
    }

    /// Why a value does not fit, said of its field and column (the mapping's `i`th).
    func fieldProblem(_ problem: String, column i: Int) -> String {
        let field = mapping.fields[i]
        return "field \(field.field): \(problem) (column \(field.column), \(field.type.rawValue))"
    }

    private mutating func appendMetaText(_ text: String?, _ what: String) -> String? {
        guard let text else {
            buffer.appendNull()
            return nil
        }
        return appendTextWithoutNUL(text) ? nil : "\(what) contains a NUL byte, which PostgreSQL text cannot hold"
    }

    /// Appends `text` as a field unless it holds a NUL, which PostgreSQL text cannot; whether it
    /// did. One look at its bytes for the check and the copy: looked at apart, each of a row's
    /// five names and stamps was taken out of its String twice, 282 instructions a record more
    /// (`Benchmarks/run`, straight path).
    @inline(__always) private mutating func appendTextWithoutNUL(_ text: String) -> Bool {
        var text = text
        return text.withUTF8 { utf8 in
            guard !utf8.containsNUL else { return false }
            buffer.appendField(utf8)
            return true
        }
    }

    private mutating func appendTimestamp(_ ms: Int64?, _ what: String) -> String? {
        guard let ms else {
            buffer.appendNull()
            return nil
        }
        guard let micros = Self.postgresMicroseconds(ms) else { return "\(what) is outside PostgreSQL's timestamp range" }
        buffer.append(timestampMicroseconds: micros)
        return nil
    }

    private mutating func appendUnmappedFields() -> String? {
        guard keepUnmapped else {
            buffer.appendNull()
            return nil
        }
        json.bytes.removeAll(keepingCapacity: true)
        json.bytes.append(UInt8(ascii: "{"))
        var first = true
        for (name, value) in unmapped {
            // jsonb cannot hold \u0000 at all.
            if name.containsNUL || value.containsNUL {
                return "field \(name) contains a NUL byte, which PostgreSQL jsonb cannot hold (unmapped, kept in the fields column)"
            }
            if !first { json.bytes.append(UInt8(ascii: ",")) }
            first = false
            json.writeString(name)
            json.bytes.append(UInt8(ascii: ":"))
            json.write(field: value)
        }
        json.bytes.append(UInt8(ascii: "}"))
        if let problem = json.bytes.withUnsafeBufferPointer({ jsonb.problem(with: $0) }) { return fieldsColumn(problem) }
        buffer.append(jsonb: json.bytes)
        return nil
    }

    // MARK: Values

    /// Milliseconds since 1970 as PostgreSQL's microseconds since 2000, when representable.
    /// > "timestamp … Low Value 4713 BC, High Value 294276 AD"
    static func postgresMicroseconds(_ ms: Int64) -> Int64? {
        let (shifted, o1) = ms.subtractingReportingOverflow(946_684_800_000)
        let (micros, o2) = shifted.multipliedReportingOverflow(by: 1_000)
        guard !o1, !o2, micros >= -211_813_488_000_000_000, micros < 9_223_371_331_200_000_000 else { return nil }
        return micros
    }

    mutating func append(_ value: FieldValue, as type: ColumnType) -> String? {
        switch (type, value) {
        case (.text, .string(let s)):
            guard appendTextWithoutNUL(s) else { return "the text contains a NUL byte, which PostgreSQL text cannot hold" }
        case (.text, .reference(let r)):
            guard appendTextWithoutNUL(r.recordName) else { return "the reference contains a NUL byte" }
        case (.bigint, .int64(let i)):
            buffer.append(bigint: i)
        case (.doublePrecision, .double(let d)):
            buffer.append(double: d)
        case (.doublePrecision, .int64(let i)):
            // Past 2^53 an INT64 has no double of its own: stored, it would be another number.
            guard let d = Double(exactly: i) else { return Self.int64PastDouble }
            buffer.append(double: d)
        case (.timestamptz, .timestamp(let ms)):
            guard let micros = Self.postgresMicroseconds(ms) else { return "the timestamp is outside PostgreSQL's range" }
            buffer.append(timestampMicroseconds: micros)
        case (.bytea, .bytes(let b64)), (.bytea, .encryptedBytes(let b64)):
            guard let bytes = Base64.decode(b64) else { return "the value is not valid base64" }
            buffer.append(bytea: bytes)
        case (.boolean, .int64(let i)) where i == 0 || i == 1:
            buffer.append(boolean: i == 1)
        case (.jsonb, _):
            if value.containsNUL { return "the value contains a NUL byte, which PostgreSQL jsonb cannot hold" }
            json.bytes.removeAll(keepingCapacity: true)
            json.writeValue(of: value)
            if let problem = json.bytes.withUnsafeBufferPointer({ jsonb.problem(with: $0) }) { return problem }
            buffer.append(jsonb: json.bytes)
        case (.textArray, .list(_, let items)):
            return appendArray(items, oid: BinaryCopyBuffer.OID.text) { buffer, item in
                switch item {
                case .string(let s) where !s.containsNUL:
                    buffer.append(text: s)
                    return true
                case .reference(let r) where !r.recordName.containsNUL:
                    buffer.append(text: r.recordName)
                    return true
                default: return false
                }
            }
        case (.bigintArray, .list(_, let items)):
            return appendArray(items, oid: BinaryCopyBuffer.OID.int8) { buffer, item in
                guard case .int64(let i) = item else { return false }
                buffer.append(bigint: i)
                return true
            }
        case (.doublePrecisionArray, .list(_, let items)):
            return appendArray(items, oid: BinaryCopyBuffer.OID.float8) { buffer, item in
                switch item {
                case .double(let d):
                    buffer.append(double: d)
                    return true
                case .int64(let i):
                    guard let d = Double(exactly: i) else { return false }
                    buffer.append(double: d)
                    return true
                default: return false
                }
            }
        case (.timestamptzArray, .list(_, let items)):
            return appendArray(items, oid: BinaryCopyBuffer.OID.timestamptz) { buffer, item in
                guard case .timestamp(let ms) = item, let micros = Self.postgresMicroseconds(ms) else { return false }
                buffer.append(timestampMicroseconds: micros)
                return true
            }
        case (.byteaArray, .list(_, let items)):
            return appendArray(items, oid: BinaryCopyBuffer.OID.bytea) { buffer, item in
                switch item {
                case .bytes(let b64), .encryptedBytes(let b64):
                    guard let bytes = Base64.decode(b64) else { return false }
                    buffer.append(bytea: bytes)
                    return true
                default: return false
                }
            }
        case (_, .unknown(let tag, _)):
            return "the value is not a valid \(tag)"
        default:
            return "\(Self.aValue(of: value.typeTag)) cannot go into this column"
        }
        return nil
    }

    /// "a STRING value", "an INT64 value".
    static func aValue(of typeTag: String) -> String {
        ("AEIOU".contains(typeTag.first ?? "X") ? "an " : "a ") + typeTag + " value"
    }

    private mutating func appendArray(
        _ items: [FieldValue], oid: Int32, _ element: (inout BinaryCopyBuffer, FieldValue) -> Bool
    ) -> String? {
        if items.isEmpty {
            buffer.appendEmptyArrayField(elementOID: oid)
            return nil
        }
        var ok = true
        // Past the row's limit, or past an array's; the limits are copied, not `self`, whose
        // buffer the closure writes.
        var (pastRow, pastArray) = (false, false)
        let (end, maxElements, maxBytes) = (rowStart + maxRowBytes, maxArrayElements, maxRowBytes)
        var (count, memory) = (0, 0)
        buffer.appendArray(elementOID: oid, count: items.count) { buffer in
            for item in items where ok {
                let before = buffer.count
                ok = element(&buffer, item)
                count += 1
                if buffer.count > end {
                    (ok, pastRow) = (false, true)
                } else if !Self.arrayFits(count: count, memory: &memory, elementBytes: buffer.count - before, maxElements: maxElements, maxBytes: maxBytes) {
                    (ok, pastArray) = (false, true)
                }
            }
        }
        if pastRow { return rowTooLarge }
        if pastArray { return arrayTooLarge }
        return ok ? nil : "a list element does not fit the column's element type"
    }
}
