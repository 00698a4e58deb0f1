/// A record's `fields` object as it came in a page: the page's bytes and where in them. A
/// destination reads the fields it maps straight from here (see `JSONReader.nextKeyBytes`);
/// `values` reads them into the model, for everything off that path.
///
/// Only fields that `JSONReader.plainFieldsObject` checked are kept so: reading them cannot fail
/// and repairs nothing.
public struct RawFields: Sendable {
    public let page: JSONBytes
    /// The object, from its opening brace to past its closing one.
    public let range: Range<Int>

    public init(page: JSONBytes, range: Range<Int>) {
        self.page = page
        self.range = range
    }

    /// A reader at the object's opening brace.
    public func reader() -> JSONReader { JSONReader(page.buffer, at: range.lowerBound) }

    /// The fields read into the model, as `RecordEntry.init(reading:)` reads them.
    public var values: [String: FieldValue] {
        var json = reader()
        var problems: [String] = []
        // Cannot fail: the object was checked when it was kept.
        return (try? RecordEntry.readFields(&json, problems: &problems)) ?? [:]
    }
}

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
