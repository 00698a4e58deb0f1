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
        try read(from: page, written: offsets.map { WrittenFields(start: $0) }, fields: [])
    }

    /// `read(from:at:)` for objects whose writer found, as it wrote them, what the check would
    /// find: those are kept with the fields it says (`WrittenFields.known`), without being read
    /// again; the others are checked as `read(from:at:)` checks them.
    ///
    /// For a writer in this package that knows its JSON is plain by how it makes it (the fake
    /// source's `JSONFields`): a destination trusts the fields' offsets, so a field it gets wrong
    /// is read wrong, which its tests compare with the check (`FakeFeedTests`). Not public for
    /// that reason: anyone else's JSON goes through the check.
    package static func read(from page: JSONBytes, written objects: [WrittenFields], fields: [RawField]) throws -> [RecordFields] {
        var json = page.reader()
        return try fields.withUnsafeBufferPointer { fields in
            try objects.map { object in
                if let lent = object.lent { return .json(lent) }
                if let known = object.known {
                    precondition(
                        object.start < known.end && known.end <= page.buffer.count && known.fields.upperBound <= fields.count,
                        "the fields written at \(object.start) lie outside their page")
                    let kept = page.keep(UnsafeBufferPointer(rebasing: fields[known.fields]))
                    return .json(RawFields(page: page, range: object.start..<known.end, fields: kept))
                }
                json.position = object.start
                if let kept = json.plainFieldsObject(keepingIn: page) { return .json(RawFields(page: page, range: kept.range, fields: kept.fields)) }
                var problems: [String] = []
                let values = try RecordEntry.readFields(&json, problems: &problems)
                if let problem = problems.first { throw json.failure(problem) }
                return .values(values)
            }
        }
    }

    /// A `fields` object a program wrote into a page: where it begins and, when the writer
    /// knows it plain (see `JSONReader.plainFieldsObject`), where it ends and which of the
    /// writer's fields are its own.
    package struct WrittenFields: Sendable {
        package var start: Int
        package var known: (end: Int, fields: Range<Int>)?
        /// An object the writer did not write into the page but lends whole, kept as it is (the
        /// fake source's field sets, `RawFields.object`): `start` and `known` are then not read.
        package var lent: RawFields?

        package init(start: Int, known: (end: Int, fields: Range<Int>)? = nil) {
            self.start = start
            self.known = known
        }
    }
}
