/// A record's fields: values in the model (made by a program, or read from JSON that needed
/// repairs), or the JSON they came in.
public enum RecordFields: Sendable {
    case values([String: FieldValue])
    case json(RawFields)

    public var values: [String: FieldValue] {
        switch self {
        case .values(let values): return values
        case .json(let raw): return raw.values
        }
    }
}

extension RecordFields {
    /// The `fields` objects that begin at `offsets` of `page` (JSON a program wrote: the fake
    /// source's), each as a record read from a response holds it: the JSON itself when the check
    /// `plainFieldsObject` lets it, otherwise read into the model. Throws when an object is not
    /// JSON, or holds text that is not valid UTF-8 (which a response's reader would repair, and
    /// reject the record).
    public static func read(from page: JSONBytes, at offsets: [Int]) throws -> [RecordFields] {
        var json = page.reader()
        return try offsets.map { offset in
            json.position = offset
            if let kept = json.plainFieldsObject(keepingIn: page) { return .json(RawFields(page: page, range: kept.range, fields: kept.fields)) }
            var problems: [String] = []
            let values = try RecordEntry.readFields(&json, problems: &problems)
            if let problem = problems.first { throw json.failure(problem) }
            return .values(values)
        }
    }
}
