import CloudKitModel
import LibPQ

extension RowEncoder {
    /// How writing a record straight from its JSON differs from writing it from the model, or
    /// nil when it does not: the same refusal word for word, the same fields noted for evolution,
    /// the same bytes in every column but the jsonb ones, and in those the same JSON (numbers
    /// compared as numbers: `1E2` is `100.0`). Unmapped fields are kept as they came, so of the
    /// `fields` column only the names and type tags are compared.
    ///
    /// The oracle of the page fuzzer (FuzzTesting) and of the tests of the straight path; nil for
    /// a record whose fields are not kept as JSON.
    public static func disagreementWithModel(writing record: Record, with mapping: PostgresRecordTypeMapping, evolving: Bool = false)
        -> String?
    {
        guard case .json = record.storedFields else { return nil }
        var straight = RowEncoder(mapping: mapping, keepUnmapped: true, evolving: evolving)
        var model = straight
        var inTheModel = record
        inTheModel.fields = record.fields
        let straightProblem = straight.append(record, seq: 0)
        let modelProblem = model.append(inTheModel, seq: 0)
        guard straightProblem == modelProblem else {
            return "refused as \(straightProblem ?? "nothing") straight from JSON, as \(modelProblem ?? "nothing") from the model"
        }
        let noted = { (encoder: RowEncoder) in Set(encoder.newFields.map { "\($0.name): \($0.typeTag)" }) }
        guard noted(straight) == noted(model) else {
            return "new fields \(noted(straight).sorted()) straight from JSON, \(noted(model).sorted()) from the model"
        }
        guard straightProblem == nil else { return nil }
        guard let a = Self.fields(ofOneRow: straight.finish()), let b = Self.fields(ofOneRow: model.finish()), a.count == b.count else {
            return "the rows do not have the same shape"
        }
        let mappedStart = 1 + 7
        for i in a.indices {
            let what = i < mappedStart ? "column \(i)" : i < a.count - 1 ? "field \(mapping.fields[i - mappedStart].field)" : "the fields column"
            if i >= mappedStart, i < a.count - 1, mapping.fields[i - mappedStart].type == .jsonb {
                guard Self.sameJSON(a[i], b[i]) else { return "\(what) differs: \(Self.text(a[i])) against \(Self.text(b[i]))" }
            } else if i == a.count - 1 {
                guard Self.sameNamesAndTypes(a[i], b[i]) else { return "\(what) differs: \(Self.text(a[i])) against \(Self.text(b[i]))" }
            } else if a[i] != b[i] {
                return "\(what) differs: \(a[i].map { Array($0) } ?? []) against \(b[i].map { Array($0) } ?? [])"
            }
        }
        return nil
    }

    /// The fields of the one tuple of a binary COPY stream.
    private static func fields(ofOneRow stream: [UInt8]) -> [ArraySlice<UInt8>?]? {
        var at = 19
        func int(_ size: Int) -> Int? {
            guard at + size <= stream.count else { return nil }
            var value = 0
            for byte in stream[at..<at + size] { value = value << 8 | Int(byte) }
            at += size
            return size == 2 ? Int(Int16(truncatingIfNeeded: value)) : Int(Int32(truncatingIfNeeded: value))
        }
        guard let count = int(2), count > 0 else { return nil }
        var fields: [ArraySlice<UInt8>?] = []
        for _ in 0..<count {
            guard let length = int(4) else { return nil }
            if length < 0 {
                fields.append(nil)
                continue
            }
            guard at + length <= stream.count else { return nil }
            fields.append(stream[at..<at + length])
            at += length
        }
        return fields
    }

    /// A jsonb field's JSON, numbers as doubles.
    private static func json(_ field: ArraySlice<UInt8>?) -> JSONValue? {
        guard let field, field.first == 1 else { return nil }
        let text = Array(field.dropFirst())
        return text.withUnsafeBufferPointer { bytes -> JSONValue? in
            var reader = JSONReader(bytes)
            return (try? reader.readValue()).map(numbersAsDoubles)
        }
    }

    private static func numbersAsDoubles(_ value: JSONValue) -> JSONValue {
        switch value {
        case .int(let i): return .double(Double(i))
        case .array(let items): return .array(items.map(numbersAsDoubles))
        case .object(let members): return .object(members.mapValues(numbersAsDoubles))
        default: return value
        }
    }

    private static func sameJSON(_ a: ArraySlice<UInt8>?, _ b: ArraySlice<UInt8>?) -> Bool {
        if a == nil || b == nil { return a == b }
        guard let x = json(a), let y = json(b) else { return false }
        return x == y
    }

    private static func sameNamesAndTypes(_ a: ArraySlice<UInt8>?, _ b: ArraySlice<UInt8>?) -> Bool {
        guard case .object(let x)? = json(a), case .object(let y)? = json(b), Set(x.keys) == Set(y.keys) else { return a == b }
        func type(_ member: JSONValue?) -> String {
            if case .object(let o)? = member, case .string(let tag)? = o["type"] { return tag }
            return "UNKNOWN"
        }
        return x.keys.allSatisfy { type(x[$0]) == type(y[$0]) }
    }

    private static func text(_ field: ArraySlice<UInt8>?) -> String {
        field.map { String(decoding: $0.dropFirst(), as: UTF8.self) } ?? "NULL"
    }
}
