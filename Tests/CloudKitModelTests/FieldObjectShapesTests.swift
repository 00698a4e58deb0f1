import Testing

@testable import CloudKitModel

/// A field's object as CloudKit writes it, `{"type":"…","value":…}` without spaces (or with its
/// members the other way round), is read by a compare of a word for each key; any other shape
/// member by member. Both ways must find the same: each object below is read as written and with
/// spaces around every colon and after every comma, which only the member-by-member way reads,
/// and the two must keep or refuse it alike and agree on its type, its value and what they noted
/// of it.
struct FieldObjectShapesTests {
    static let shapes = [
        #"{"type":"STRING","value":"text"}"#,
        #"{"value":"text","type":"STRING"}"#,
        #"{"type":"STRING","value":"a \"quoted\" word\n"}"#,
        #"{"value":"caf\u00e9","type":"STRING"}"#,
        #"{"type":null,"value":1}"#,
        #"{"value":1,"type":null}"#,
        #"{"type":"INT64","value":-12}"#,
        #"{"value":{"latitude":1.5,"longitude":2E1},"type":"LOCATION"}"#,
        #"{"type":"LOCATION","value":{"latitude":1.5,"nested":[{"a":true}]}}"#,
        #"{"value":{"a":1e400},"type":"LOCATION"}"#,
        #"{"type":"INT64","value":1,"type":"DOUBLE"}"#,
        #"{"value":1,"type":"INT64","value":2}"#,
        #"{"type":"STRING","value":"x","extra":[1,2]}"#,
        #"{"extra":{},"type":"STRING","value":"x"}"#,
        #"{"type":"ST\u0052ING","value":"x"}"#,
        #"{"t\u0079pe":"STRING","value":"x"}"#,
        #"{"value":[1,2,3],"type":"INT64_LIST"}"#,
        #"{"type":"STRING_LIST","value":[]}"#,
        #"{"type":"STRING"}"#,
        #"{"value":"x"}"#,
        #"{}"#,
        #"{"type":5,"value":1}"#,
        #"{"type":"STRING","valueX":1}"#,
        #"{"typeX":"STRING","value":1}"#,
        #"{"type":"","value":""}"#,
        #"{"type":"STRING","value":"\ud800"}"#,
        #"{"value":"x","type":"STRING","type":null}"#,
    ]

    @Test(arguments: shapes)
    func aFieldObjectReadsTheSameWrittenCompactlyOrWithSpaces(shape: String) throws {
        // At the end of the data too, where fewer than eight bytes follow a key.
        for object in [#"{"f":"# + shape + "}", #"{"f":"# + shape + #","g":{"type":"INT64","value":7}}"#] {
            let compact = try Self.read(object)
            let spaced = try Self.read(Self.spaced(object)).map { $0.map(\.withoutSpaces) }
            #expect(compact == spaced, "\(object)")
        }
    }

    /// The spaced copy really is read the other way: no key of it is followed by what the
    /// compares look for.
    @Test func theSpacedCopyHasNoKeyWrittenCompactly() {
        let spaced = Self.spaced(Self.shapes.joined(separator: ","))
        for compact in [#""type":"#, #""value":"#, #","type""#, #","value""#] { #expect(!spaced.contains(compact), "\(compact)") }
    }

    /// What a kept field says, in terms that do not depend on where it stands: its type's text,
    /// its value's text up to where a string or an object kept as it came ends (of any other
    /// value, its first byte), and what was noted of it; and the fields as the model reads them.
    struct Found: Equatable {
        var tag: String?
        var value: String?
        var stringEscaped: Bool
        var objectKept: Bool
        var model: [String: FieldValue]?

        /// The same, its value's text without the spaces `spaced` put in.
        var withoutSpaces: Found {
            var found = self
            found.value = value.map(FieldObjectShapesTests.unspaced)
            return found
        }
    }

    static func read(_ object: String) throws -> [Found]? {
        let page = JSONBytes.copying(Array(object.utf8))
        guard let read = try? RecordFields.read(from: page, at: [0]).first else { return nil }
        guard case .json(let raw) = read else { return [Found(tag: nil, value: nil, stringEscaped: false, objectKept: false, model: read.values)] }
        return withExtendedLifetime(raw.page) {
            let bytes = page.buffer
            func text(_ range: Range<Int>) -> String { String(decoding: bytes[range], as: UTF8.self) }
            return raw.fields.map { field in
                let value = Int(field.value)
                var end: Int?
                if field.stringEnd >= 0 { end = Int(field.stringEnd) + 1 }
                if field.objectKeptUpTo >= 0 { end = Int(field.objectKeptUpTo) }
                return Found(
                    tag: field.tag.map { text(Int($0.lowerBound)..<Int($0.upperBound)) },
                    // Otherwise its first byte: where it starts.
                    value: value < 0 ? nil : end.map { text(value..<$0) } ?? text(value..<value + 1),
                    stringEscaped: field.stringEscaped, objectKept: field.objectKeptUpTo >= 0,
                    model: raw.values)
            }
        }
    }

    /// The JSON with spaces around every colon and after every comma outside its strings.
    static func spaced(_ json: String) -> String {
        outsideStrings(json) { $0 == ":" ? " : " : $0 == "," ? ", " : String($0) }
    }

    /// `spaced` undone (the shapes have no spaces of their own outside strings).
    static func unspaced(_ json: String) -> String {
        outsideStrings(json) { $0 == " " ? "" : String($0) }
    }

    /// The JSON with each character outside its strings replaced by `change`'s text for it.
    static func outsideStrings(_ json: String, _ change: (Character) -> String) -> String {
        var out = ""
        var inString = false
        var escaped = false
        for character in json {
            out += inString || character == "\"" ? String(character) : change(character)
            if inString {
                if escaped {
                    escaped = false
                } else if character == "\\" {
                    escaped = true
                } else if character == "\"" {
                    inString = false
                }
            } else if character == "\"" {
                inString = true
            }
        }
        return out
    }
}
