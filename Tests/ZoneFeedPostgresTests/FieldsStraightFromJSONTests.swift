import CloudKitModel
import FakeCloudKit
import Foundation
import Testing
import ZoneFeedPostgres

/// Fields read from a page stay its JSON and go into rows straight from it. Whatever a value
/// is, the row must be the one the model writes: the same columns, the same refusals word for
/// word, the same fields noted for evolution (`RowEncoder.disagreementWithModel`).
@Suite struct FieldsStraightFromJSONTests {
    /// Every column type, a column made by evolution for STRING values, and names for the odd
    /// cases below.
    static let mapping: PostgresRecordTypeMapping = {
        func field(_ name: String, _ type: ColumnType) -> PostgresFieldMapping { PostgresFieldMapping(field: name, column: name, type: type) }
        var made = field("made", .text)
        made.cloudKitType = "STRING"
        var mapping = PostgresRecordTypeMapping(
            recordType: "Note", table: "notes",
            fields: [
                field("s", .text), field("r", .text), field("i", .bigint), field("d", .doublePrecision), field("t", .timestamptz),
                field("b", .bytea), field("j", .jsonb), field("bo", .boolean), field("sl", .textArray), field("rl", .textArray),
                field("il", .bigintArray), field("dl", .doublePrecisionArray), field("tl", .timestamptzArray), field("bl", .byteaArray), made,
            ])
        mapping.omittedFields = ["leftOut"]
        return mapping
    }()

    /// The Note of `zonefeed bench` (and pipelines/demo.yml).
    static let benchNotes = PostgresRecordTypeMapping(
        recordType: "Note", table: "notes",
        fields: [
            ("title", ColumnType.text), ("body", .text), ("wordCount", .bigint), ("rating", .doublePrecision), ("editedAt", .timestamptz),
            ("thumbnail", .bytea), ("folder", .text), ("attachment", .jsonb), ("place", .jsonb), ("tags", .textArray),
            ("counts", .bigintArray), ("scores", .doublePrecisionArray), ("reminders", .timestamptzArray), ("chunks", .byteaArray),
            ("related", .textArray),
        ].map { PostgresFieldMapping(field: $0.0, column: $0.0, type: $0.1) })

    /// Reads a page whose records have these `fields` objects, keeping the fields as JSON.
    static func records(_ fieldObjects: [String]) throws -> [Record] {
        let entries = fieldObjects.enumerated().map { i, fields in
            #"{"recordName":"R\#(i)","recordType":"Note","recordChangeTag":"t","fields":\#(fields)}"#
        }
        return try Self.entries(#"[\#(entries.joined(separator: ","))]"#).map { entry in
            guard case .record(let record) = entry else { throw Unexpected(entry: "\(entry)") }
            return record
        }
    }

    struct Unexpected: Error { var entry: String }

    /// A page's `records` array, read as a page is, from bytes records may point into.
    static func entries(_ array: String) throws -> [RecordEntry] { try entries(Array(array.utf8)) }

    static func entries(_ array: [UInt8]) throws -> [RecordEntry] {
        var reader = JSONBytes.copying(array).reader()
        var entries: [RecordEntry] = []
        try reader.beginArray()
        while try reader.nextElement() { entries.append(try RecordEntry.readAny(&reader)) }
        return entries
    }

    /// `{"a":…,"b":…}` as `{"a":…}` and `{"b":…}`, each member's text as written.
    static func eachMemberAlone(_ object: String) throws -> [String] {
        let bytes = Array(object.utf8)
        return try bytes.withUnsafeBufferPointer { buffer in
            var reader = JSONReader(buffer)
            var members: [String] = []
            try reader.beginObject()
            while let name = try reader.nextKeyBytes() {
                let value = try reader.readValueBytes()
                members.append("{\"\(String(decoding: name, as: UTF8.self))\":\(String(decoding: value, as: UTF8.self))}")
            }
            return members
        }
    }

    static func keptAsJSON(_ record: Record) -> Bool {
        if case .json = record.storedFields { return true }
        return false
    }

    @Test func theBenchsRecordsGoInWithoutTheModelAndAsTheModelWritesThem() throws {
        let feed = FakeFeed(settings: FakeSettings(seed: 3, zones: 1, recordsPerZone: 600))
        // The generator's records as a page, as the fake server would send them.
        let page =
            "["
            + feed.entries(zone: 0, range: 0..<600).map { entry -> String in
                var writer = JSONWriter()
                writer.write(entry.json)
                return String(decoding: writer.bytes, as: UTF8.self)
            }.joined(separator: ",") + "]"
        let records = try Self.entries(page).compactMap { entry -> Record? in
            if case .record(let record) = entry { return record }
            return nil
        }
        let notes = Self.benchNotes
        var encoder = RowEncoder(mapping: notes, keepUnmapped: true)
        var written = 0
        for record in records where record.recordType == "Note" {
            #expect(Self.keptAsJSON(record), "\(record.recordName)")
            #expect(RowEncoder.disagreementWithModel(writing: record, with: notes) == nil, "\(record.recordName)")
            if encoder.append(record, seq: 0) == nil { written += 1 }
        }
        #expect(written > 300)
        #expect(encoder.valuesFromTheModel == 0, "every value of the bench's shape is written straight from its JSON")
    }

    @Test func oddValuesOfEveryTypeGoWhereTheModelPutsThem() throws {
        let cases = [
            // Plain values, type before value, value absent, type null or missing.
            #"{"s":{"value":"plain","type":"STRING"},"i":{"type":"INT64","value":42},"d":{"value":1.5,"type":"DOUBLE"}}"#,
            #"{"s":{"type":"STRING"},"i":{"value":7},"d":{"value":2,"type":null},"t":{}}"#,
            // Escapes, text past ASCII, a surrogate pair, an escaped slash in base64.
            #"{"s":{"value":"a\"b\\c\/d\u00e9\ud83d\ude00é\n","type":"STRING"},"b":{"value":"YW\/i","type":"BYTES"}}"#,
            // Numbers: INT64 as a string, a double given for INT64, -0, exponents, DOUBLE as a string.
            #"{"i":{"value":"12","type":"INT64"},"d":{"value":-0,"type":"DOUBLE"},"t":{"value":1e3,"type":"TIMESTAMP"}}"#,
            #"{"i":{"value":1.0,"type":"INT64"},"d":{"value":"2.5","type":"DOUBLE"},"t":{"value":-0,"type":"TIMESTAMP"}}"#,
            #"{"i":{"value":9223372036854775807,"type":"INT64"},"d":{"value":1E2,"type":"DOUBLE"},"t":{"value":-62135596800000,"type":"TIMESTAMP"}}"#,
            #"{"i":{"value":9223372036854775808,"type":"INT64"},"d":{"value":12,"type":"INT64"},"t":{"value":9223372036854775807,"type":"TIMESTAMP"}}"#,
            // DOUBLEs spelling a number that is no finite one (past a Double's range, `1e400`
            // is read into the model: `aDOUBLEThatIsNoFiniteNumberIsARejectNotInfinity`).
            #"{"d":{"value":"NaN","type":"DOUBLE"},"dl":{"value":["inf"],"type":"DOUBLE_LIST"},"j":{"value":"-infinity","type":"DOUBLE"}}"#,
            // Pairs the column does not take, each refused as the model refuses it.
            #"{"i":{"value":"many","type":"STRING"}}"#, #"{"b":{"value":"not base64!","type":"BYTES"}}"#,
            #"{"b":{"value":"YQ=","type":"BYTES"}}"#, #"{"bo":{"value":2,"type":"INT64"}}"#,
            #"{"bo":{"value":1,"type":"INT64"},"s":{"value":3,"type":"STRING"}}"#,
            #"{"made":{"value":"x","type":"STRING"}}"#, #"{"made":{"value":3,"type":"INT64"}}"#, #"{"made":{"value":"x"}}"#,
            // References: plain, with a zone, without its name, with a number for a name, odd members.
            #"{"r":{"value":{"recordName":"ref-1","action":"NONE"},"type":"REFERENCE"}}"#,
            #"{"r":{"value":{"recordName":"ref-2","zoneID":{"zoneName":"Z","ownerRecordName":"_o","zoneType":"REGULAR_CUSTOM_ZONE"}},"type":"REFERENCE"}}"#,
            #"{"r":{"value":{"recordName":"ref-3","zoneID":{"ownerRecordName":"_o"}},"type":"REFERENCE"}}"#,
            #"{"r":{"value":{"recordName":5},"type":"REFERENCE"}}"#, #"{"r":{"value":{"action":"NONE"},"type":"REFERENCE"}}"#,
            #"{"r":{"value":{"recordName":"a","recordName":"b","extra":[1,{"x":null}]},"type":"REFERENCE"}}"#,
            #"{"r":{"value":"just a name","type":"REFERENCE"},"s":{"value":{"recordName":"x"},"type":"REFERENCE"}}"#,
            // References in CloudKit's order (read by a compare a member) and each way of leaving
            // it: a name with escapes, no owner, a member of the wrong type, one more member, a
            // second name, spaces.
            #"{"r":{"value":{"recordName":"a\"b\u00e9","zoneID":{"zoneName":"Z","ownerRecordName":"_o","zoneType":"T"},"action":"NONE"},"type":"REFERENCE"}}"#,
            #"{"r":{"value":{"recordName":"n","zoneID":{"zoneName":"Z","zoneType":"T"}},"type":"REFERENCE"}}"#,
            #"{"r":{"value":{"recordName":"n","zoneID":{"zoneName":5}},"type":"REFERENCE"}}"#,
            #"{"r":{"value":{"recordName":"n","zoneID":{"zoneName":"Z","ownerRecordName":null}},"type":"REFERENCE"}}"#,
            #"{"r":{"value":{"recordName":"n","zoneID":{"zoneName":"Z","zoneType":7},"action":"NONE"},"type":"REFERENCE"}}"#,
            #"{"r":{"value":{"recordName":"n","action":5},"type":"REFERENCE"}}"#,
            #"{"r":{"value":{"recordName":"n","zoneID":{"zoneName":"Z","extra":[1]},"action":"NONE"},"type":"REFERENCE"}}"#,
            #"{"r":{"value":{"recordName":"n","action":"NONE","recordName":"m"},"type":"REFERENCE"}}"#,
            #"{"r":{"value":{"recordName":"n","action":"NONE","zoneID":{"ownerRecordName":"_o"}},"type":"REFERENCE"}}"#,
            #"{"r":{"value":{ "recordName":"n", "action":"NONE"},"type":"REFERENCE"}}"#,
            #"{"rl":{"value":[{"recordName":"a","action":"NONE"},{"recordName":"b","zoneID":{"zoneName":"Z","ownerRecordName":"_o"}},{"recordName":"c\n"}],"type":"REFERENCE_LIST"}}"#,
            #"{"rl":{"value":[{"recordName":"a","action":"NONE"},{"recordName":"b","action":5}],"type":"REFERENCE_LIST"}}"#,
            // jsonb: assets and locations as they came, strings, integers, and the rest by the model.
            #"{"j":{"value":{"fileChecksum":"abc","size":1.50,"n":1E2,"big":123456789012345678901234567890},"type":"ASSETID"}}"#,
            #"{"j":{"value":{"latitude":37.33,"longitude":-122.03,"altitude":-0.0},"type":"LOCATION"}}"#,
            // Numbers and keys the model would change on the way (past a Double's range or
            // digits, Unicode-equivalent keys): the model writes them.
            #"{"j":{"value":{"latitude":1e309},"type":"LOCATION"}}"#, #"{"j":{"value":{"latitude":1e-320},"type":"LOCATION"}}"#,
            #"{"j":{"value":{"size":12345678901234567},"type":"ASSETID"}}"#, #"{"j":{"value":{"x":1.2345678901234567},"type":"ASSETID"}}"#,
            #"{"j":{"value":{"café":1,"cafe\#u{301}":2},"type":"ASSETID"}}"#, #"{"j":{"value":{"n":[1,{"m":0.000123}]},"type":"ASSETID"}}"#,
            #"{"j":{"value":{"n":[{"ok":1},{"é":2}]},"type":"ASSETID"}}"#, #"{"j":{"value":{"n":[{"m":1e-301}]},"type":"LOCATION"}}"#,
            // The last value counts, whatever the one before it was; the type may come first.
            #"{"j":{"value":{"x":1e309},"value":{"x":1.5},"type":"LOCATION"}}"#, #"{"j":{"value":{"x":1.5},"value":{"x":1e309},"type":"LOCATION"}}"#,
            #"{"j":{"value":{"x":1.5},"value":7,"type":"LOCATION"}}"#, #"{"j":{"type":"LOCATION","value":{"latitude":1.5,"n":null,"b":true}}}"#,
            #"{"j":{"value":"text","type":"STRING"}}"#, #"{"j":{"value":-5,"type":"INT64"}}"#, #"{"j":{"value":2,"type":"DOUBLE"}}"#,
            // A string without escapes is copied as its bytes: only when the last value is one.
            #"{"s":{"value":"plain","value":3,"type":"STRING"},"b":{"value":"YQ==","value":"YW\/i","type":"BYTES"}}"#,
            #"{"s":{"value":3,"value":"plain","type":"STRING"},"j":{"value":"a\"b","value":"plain","type":"STRING"}}"#,
            #"{"s":{"value":"plain","value":"pla\u0069n","type":"STRING"},"j":{"value":"plain","value":{"x":1},"type":"STRING"}}"#,
            #"{"s":{"value":"","type":"STRING"},"b":{"value":"","type":"BYTES"},"j":{"value":"","type":"STRING"}}"#,
            #"{"j":{"value":[1,2.5],"type":"DOUBLE_LIST"}}"#, #"{"j":{"value":{"a":1},"type":"WHATEVER"}}"#,
            #"{"j":{"value":{"recordName":"x"},"type":"REFERENCE"}}"#, #"{"j":{"value":"12","type":"INT64"}}"#,
            // A type written with an escape is the type it spells (the model undoes the escape).
            #"{"s":{"value":"x","type":"STR\u0049NG"},"i":{"value":3,"type":"\u0049NT64"}}"#,
            // Lists: plain, empty, mixed, wrong elements, references, base64.
            #"{"sl":{"value":["a","b\u00e9"],"type":"STRING_LIST"},"il":{"value":[1,-9223372036854775808],"type":"INT64_LIST"}}"#,
            #"{"sl":{"value":[],"type":"STRING_LIST"},"il":{"value":[],"type":"INT64_LIST"},"dl":{"value":[],"type":"DOUBLE_LIST"}}"#,
            #"{"sl":{"value":["a",1],"type":"STRING_LIST"},"il":{"value":[1.5],"type":"INT64_LIST"}}"#,
            #"{"il":{"value":["3"],"type":"INT64_LIST"},"dl":{"value":[1,2.5,-0],"type":"DOUBLE_LIST"}}"#,
            #"{"dl":{"value":[1,2],"type":"INT64_LIST"},"tl":{"value":[0,1650000000000],"type":"TIMESTAMP_LIST"}}"#,
            #"{"tl":{"value":[9223372036854775807],"type":"TIMESTAMP_LIST"}}"#, #"{"sl":{"value":[1,2],"type":"INT64_LIST"}}"#,
            #"{"rl":{"value":[{"recordName":"a"},{"recordName":"b","zoneID":{"zoneName":"Z"}}],"type":"REFERENCE_LIST"}}"#,
            #"{"rl":{"value":[{"recordName":"a"},{"zoneID":{"zoneName":"Z"}}],"type":"REFERENCE_LIST"}}"#,
            #"{"bl":{"value":["YQ==","YWI="],"type":"BYTES_LIST"}}"#, #"{"bl":{"value":["YQ==","*"],"type":"BYTES_LIST"}}"#,
            #"{"bl":{"value":["YW\/i"],"type":"ENCRYPTED_BYTES_LIST"}}"#, #"{"sl":{"value":"not a list","type":"STRING_LIST"}}"#,
            // A name twice (the last one counts), unmapped fields of every shape, one left out.
            #"{"s":{"value":"first","type":"STRING"},"s":{"value":"second","type":"STRING"}}"#,
            #"{"newOne":{"value":1,"type":"INT64"},"leftOut":{"value":"x","type":"STRING"},"other":{"value":[1],"extra":true}}"#,
            #"{"typeless":{"value":"x"},"nullType":{"value":1,"type":null},"valueless":{"type":"STRING"}}"#,
            #"{"  spaced ":{ "value" : "x" , "type" : "STRING" } , "s" : { "type" : "STRING" , "value" : "y" } }"#,
            #"{}"#,
        ]
        // Each object whole, and each of its fields alone: a refused field would hide the rest.
        let objects = try cases + cases.flatMap(Self.eachMemberAlone)
        let records = try Self.records(objects)
        #expect(records.count == objects.count)
        for (record, text) in zip(records, objects) {
            #expect(Self.keptAsJSON(record), "\(text)")
            for evolving in [false, true] {
                #expect(RowEncoder.disagreementWithModel(writing: record, with: Self.mapping, evolving: evolving) == nil, "\(text)")
            }
        }
    }

    /// An INT64 in a double precision column (a schema file's NUMBER, say) is written as its
    /// double while it has one of its own; past 2^53 doubles skip integers, and 2^53 + 1 was
    /// stored as 2^53, another number, without a word. It is a reject now, on either path, and
    /// so is a list holding one.
    @Test func anINT64ThatNoDoubleHoldsIsARejectNotAnotherNumber() throws {
        let exact = #"{"d":{"value":9007199254740992,"type":"INT64"},"dl":{"value":[1,-9007199254740992],"type":"INT64_LIST"}}"#
        let past = [
            #"{"d":{"value":9007199254740993,"type":"INT64"}}"#, #"{"d":{"value":-9223372036854775807,"type":"INT64"}}"#,
            #"{"dl":{"value":[1,9007199254740993],"type":"INT64_LIST"}}"#,
        ]
        let records = try Self.records([exact] + past)
        for (record, text) in zip(records, [exact] + past) {
            #expect(RowEncoder.disagreementWithModel(writing: record, with: Self.mapping) == nil, "\(text)")
        }
        var encoder = RowEncoder(mapping: Self.mapping, keepUnmapped: true, evolving: false)
        #expect(encoder.append(records[0], seq: 0) == nil, "2^53 has a double of its own")
        let refusal =
            "field d: the INT64 value has no double precision of its own (past 2^53 doubles skip integers) and would be stored as another "
            + "number: map the field to bigint (column d, double precision)"
        #expect(encoder.append(records[1], seq: 1) == refusal)
        #expect(encoder.append(records[2], seq: 2) == refusal)
        #expect(encoder.append(records[3], seq: 3) != nil, "a list holding one")
    }

    /// A DOUBLE past a Double's range (`1e400`) read as infinity, and went into its column as
    /// that (binary COPY takes infinity's bits, where PostgreSQL refuses `1e400` as text); a
    /// DOUBLE given as the string "NaN" went in as NaN. Each is a reject now, on either path.
    @Test func aDOUBLEThatIsNoFiniteNumberIsARejectNotInfinity() throws {
        let fine = #"{"d":{"value":1e300,"type":"DOUBLE"},"dl":{"value":[-1e-300,"2.5"],"type":"DOUBLE_LIST"}}"#
        let odd = [
            #"{"d":{"value":1e400,"type":"DOUBLE"}}"#, #"{"d":{"value":-1e400,"type":"DOUBLE"}}"#, #"{"d":{"value":"NaN","type":"DOUBLE"}}"#,
            #"{"d":{"value":"inf","type":"DOUBLE"}}"#, #"{"dl":{"value":[1,1e400],"type":"DOUBLE_LIST"}}"#,
        ]
        let records = try Self.records([fine] + odd)
        var encoder = RowEncoder(mapping: Self.mapping, keepUnmapped: true, evolving: false)
        #expect(encoder.append(records[0], seq: 0) == nil)
        for (i, record) in records.enumerated().dropFirst() {
            let refusal = encoder.append(record, seq: Int32(i))
            #expect(refusal?.hasPrefix(record.fields.keys.first == "dl" ? "field dl" : "field d") == true, "\(odd[i - 1]): \(String(describing: refusal))")
        }
    }

    /// The page fuzzer's seeds and every page that once broke it (FuzzTesting/Corpus and
    /// FailCases of FuzzPageDecoder), under the same oracle.
    @Test func theFuzzersPagesWriteRowsAsTheModelDoes() throws {
        let fuzzing = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../FuzzTesting").standardized
        var pages = 0
        var kept = 0
        for folder in ["Corpus/FuzzPageDecoder", "FailCases/FuzzPageDecoder"] {
            let url = fuzzing.appendingPathComponent(folder)
            for name in try FileManager.default.contentsOfDirectory(atPath: url.path) where !name.hasPrefix(".") {
                let page = Array(try Data(contentsOf: url.appendingPathComponent(name)))
                guard let records = try? Self.recordsMember(of: page) else { continue }
                pages += 1
                for entry in (try? Self.entries(records)) ?? [] {
                    guard case .record(let record) = entry else { continue }
                    if Self.keptAsJSON(record) { kept += 1 }
                    for evolving in [false, true] {
                        #expect(RowEncoder.disagreementWithModel(writing: record, with: Self.mapping, evolving: evolving) == nil, "\(name)")
                    }
                }
            }
        }
        #expect(pages >= 10)
        #expect(kept >= 50, "the oracle held rows written straight from JSON, not only the model's against itself")
    }

    /// The bytes of a page's `records` array.
    static func recordsMember(of page: [UInt8]) throws -> [UInt8] {
        try page.withUnsafeBufferPointer { buffer in
            var reader = JSONReader(buffer)
            try reader.beginObject()
            while let key = try reader.nextKey() {
                if key == "records" { return Array(try reader.readValueBytes()) }
                try reader.skipValue()
            }
            throw Unexpected(entry: "no records")
        }
    }

    /// What the model would repair, and what jsonb would refuse or swell on, is never kept as
    /// JSON: such fields are read into the model when the page is, which says what is wrong.
    @Test func fieldsThatWouldNeedRepairOrSwellAreReadIntoTheModel() throws {
        let cases = [
            #"{"s":{"value":"a\u0000b","type":"STRING"}}"#, #"{"s":{"value":"\ud800","type":"STRING"}}"#,
            #"{"s":{"value":"\udc00x","type":"STRING"}}"#, #"{"u":{"value":1e400,"type":"DOUBLE"}}"#,
            #"{"u":{"value":1e-331,"type":"DOUBLE"}}"#, #"{"u":{"value":\#(String(repeating: "9", count: 80)),"type":"INT64"}}"#,
            #"{"u":{"value":1,"type":5}}"#, #"{"u":[1]}"#, #"{"u\u0041":{"value":1,"type":"INT64"}}"#,
            // A name past ASCII: compared as bytes it could miss a column a Swift String finds.
            #"{"café":{"value":1,"type":"INT64"}}"#,
        ]
        for text in cases {
            let entries = try? Self.entries(#"[{"recordName":"R","recordType":"Note","fields":\#(text)}]"#)
            switch entries?.first {
            case .record(let record)?: #expect(!Self.keptAsJSON(record), "\(text)")
            // Half a surrogate pair: a reject, as before; and an entry of no shape CloudKit sends
            // (a field that is not an object, a type that is a number), which was a page refused.
            case .unreadable?: #expect(!text.contains(#""value":1,"type":"INT64""#), "\(text)")
            default: Issue.record("\(text) was read as \(String(describing: entries))")
            }
        }
        // Invalid UTF-8 between the quotes.
        var bytes = Array(#"[{"recordName":"R","recordType":"Note","fields":{"s":{"value":"ab","type":"STRING"}}}]"#.utf8)
        bytes.insert(0xFF, at: bytes.lastIndex(of: UInt8(ascii: "b"))!)
        guard case .unreadable(let entry)? = try Self.entries(bytes).first else {
            Issue.record("a field that is not UTF-8 makes the entry unreadable, as before")
            return
        }
        #expect(entry.problem == "field s holds text that is not valid UTF-8")
    }
}
