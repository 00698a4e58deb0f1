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
