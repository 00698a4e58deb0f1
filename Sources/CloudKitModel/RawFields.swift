/// A record's `fields` object as it came in a page: the page's bytes and where in them. A
/// destination reads the fields it maps straight from here (see `JSONReader.nextKeyBytes`);
/// `values` reads them into the model, for everything off that path.
///
/// Only fields that `JSONReader.plainFieldsObject` checked, or that their writer made knowing
/// they would pass it (`RecordFields.read(from:written:fields:)`), are kept so: reading them
/// cannot fail and repairs nothing.
public struct RawFields: @unchecked Sendable {
    // @unchecked: `fields` points into the page's index, which `page` keeps alive and which is
    // never written again once the record is made (`JSONBytes.keep`).
    public let page: JSONBytes
    /// The object, from its opening brace to past its closing one.
    public let range: Range<Int>
    /// Each field as the check found it (or its writer noted it, see
    /// `RecordFields.read(from:written:fields:)`), in the order they came, in the page's index: valid
    /// while `page` is (read it within `withExtendedLifetime(page)`).
    public let fields: UnsafeBufferPointer<RawField>

    init(page: JSONBytes, range: Range<Int>, fields: UnsafeBufferPointer<RawField>) {
        self.page = page
        self.range = range
        self.fields = fields
    }

    /// A `fields` object a program wrote and noted (the fake source's field sets), as a page of
    /// its own: its text copied, from its opening brace to past its closing one, and `fields`
    /// noted from its first byte. For a writer in this package that knows its JSON plain, as
    /// `RecordFields.read(from:written:fields:)` trusts one.
    package static func object(copying text: UnsafeBufferPointer<UInt8>, fields: UnsafeBufferPointer<RawField>) -> RawFields {
        let page = JSONBytes(copying: UnsafeRawBufferPointer(text))
        return RawFields(page: page, range: 0..<text.count, fields: page.keepAlone(fields))
    }

    /// A reader at the object's opening brace.
    public func reader() -> JSONReader { JSONReader(page.buffer, at: range.lowerBound) }

    /// The fields read into the model, as `RecordEntry.init(reading:)` reads them.
    public var values: [String: FieldValue] {
        var json = reader()
        var problems: [String] = []
        // Cannot fail: the object was checked, or written knowing it plain, when it was kept.
        return (try? RecordEntry.readFields(&json, problems: &problems)) ?? [:]
    }
}

/// One field of a kept `fields` object: where, in the page, its name is (between its quotes),
/// its object, its value and its type tag (between its quotes). Offsets as Int32 keep a field's
/// entry to 40 bytes, a record's 20 fields to about 13 cache lines.
public struct RawField: Sendable, Equatable {
    public var name: Range<Int32>
    /// From the field's opening brace.
    public var objectStart: Int32
    /// Past the field's closing brace.
    public var objectEnd: Int32 = 0
    /// Where the last `value` starts; -1 when there is none.
    public var value: Int32 = -1
    /// Past the last `value`'s closing brace when it is an object that the model would write
    /// back as the same JSON but for the form of its numbers (1E2 as 100.0, the same number to
    /// jsonb), so that it can go into jsonb as it came; -1 otherwise.
    public var objectKeptUpTo: Int32 = -1
    /// Where the last `value`'s closing quote is when it is a string (checked: valid UTF-8, no
    /// NUL, no half of a surrogate pair, escaped or not); -1 otherwise.
    public var stringEnd: Int32 = -1
    /// The last `type`'s bytes, between its quotes, escapes and all; nil when there is none, or
    /// it is null.
    public var tag: Range<Int32>?
    /// Whether the string at `stringEnd` has an escape. Without one, its text is its bytes from
    /// the opening quote on. (Last, in the byte after `tag`'s: before it, the entry took 44 bytes.)
    public var stringEscaped = false

    package init(name: Range<Int32>, objectStart: Int32) {
        self.name = name
        self.objectStart = objectStart
    }
}
