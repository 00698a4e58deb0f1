import CloudKitModel
import FakeCloudKit
import Foundation
import Testing
import ZoneFeed

@testable import CloudKitWebServices

/// Change pages are decoded by `JSONReader` on the hot path; everything else still goes through
/// `JSONDecoder`. The two must read every page the same way.
@Suite struct PageReaderTests {
    static func read(_ text: String) throws -> RecordZoneChangesResponse {
        try Array(text.utf8).withUnsafeBufferPointer { bytes in
            var reader = JSONReader(bytes)
            return try RecordZoneChangesResponse(reading: &reader)
        }
    }

    static func decoded(_ text: String) throws -> RecordZoneChangesResponse {
        try JSONDecoder().decode(RecordZoneChangesResponse.self, from: Data(text.utf8))
    }

    /// A page counts the memory its records hold (`byteCount`, which bounds a batch): its body,
    /// which fields kept as JSON point into, and more for fields read into the model.
    @Test func aPageCountsItsBodyAndMoreForTheFieldsItReadIntoTheModel() throws {
        let plain = #"{"title":{"value":"a","type":"STRING"}}"#
        // A name written with an escape is compared as text, not as bytes: these fields are read
        // into FieldValues.
        let escaped = #"{"title":{"value":"b","type":"STRING"},"co\u0075nts":{"value":[1,2,3],"type":"INT64_LIST"}}"#
        let text =
            #"{"records":[{"recordName":"p","recordType":"Note","fields":"# + plain + #"},"#
            + #"{"recordName":"q","recordType":"Note","fields":"# + escaped + #"}],"syncToken":"t","moreComing":false}"#
        var reader = JSONBytes.copying(Array(text.utf8)).reader()
        let page = try RecordZoneChangesResponse(reading: &reader)

        guard case .record(let p) = page.records[0], case .json = p.storedFields, case .record(let q) = page.records[1], case .values = q.storedFields
        else {
            Issue.record("the first record's fields are kept as JSON, the second's read into the model: \(page.records)")
            return
        }
        #expect(q.fields["counts"] == .list(tag: "INT64_LIST", [.int64(1), .int64(2), .int64(3)]))
        #expect(page.byteCount == text.utf8.count + escaped.utf8.count * JSONReader.modelBytesPerJSONByte)
    }

    /// An entry of no shape CloudKit sends is held as a tree of its JSON for the reject, and
    /// counted as fields read into the model are: a list of a million small numbers before a
    /// change tag that is a number was held as 10 bytes a number while the page counted none.
    @Test func anEntryOfNoShapeCountsAsFieldsReadIntoTheModelDo() throws {
        let odd = #"{"recordName":"odd","recordType":"Note","fields":{"n":{"value":[1,2,3,4,5,6,7,8,9],"type":"INT64_LIST"}},"recordChangeTag":5}"#
        let text = #"{"records":["# + odd + #"],"syncToken":"t","moreComing":false}"#
        var reader = JSONBytes.copying(Array(text.utf8)).reader()
        let page = try RecordZoneChangesResponse(reading: &reader)
        guard case .unreadable? = page.records.first else {
            Issue.record("\(page.records)")
            return
        }
        #expect(page.byteCount == text.utf8.count + odd.utf8.count * JSONReader.modelBytesPerJSONByte)
    }

    @Test func everyFieldTypeReadsAsJSONDecoderDecodesIt() throws {
        #expect(try Self.read(DecodingTests.everyFieldType) == Self.decoded(DecodingTests.everyFieldType))
    }

    @Test func generatedPagesReadAsJSONDecoderDecodesThem() throws {
        let feed = FakeFeed(settings: FakeSettings(seed: 5, zones: 1, recordsPerZone: 3_000, badRecordEvery: 40))
        let encoder = JSONEncoder()
        for start in stride(from: 0, to: 3_000, by: 500) {
            let entries = feed.entries(zone: 0, range: start..<start + 500)
            let page = RecordZoneChangesResponse(records: entries, syncToken: "t\(start)", moreComing: true)
            let text = String(decoding: try encoder.encode(WirePage(page)), as: UTF8.self)
            let read = try Self.read(text)
            #expect(read == (try Self.decoded(text)))
            #expect(read.records.map(\.recordName) == entries.map(\.recordName))
        }
    }

    @Test func escapesNumbersAndSpacingReadAsJSONDecoderDecodesThem() throws {
        let text = #"""
             { "moreComing" : true , "syncToken":"a\"b\\c\/d" ,
              "records" : [ { "recordName" : "r\u00e9\ud83d\ude00\n\t" , "recordType":"Note",
                "fields" : { "neg" : { "type" : "DOUBLE" , "value" : -0 },
                             "negDot" : { "value" : -0.0 , "type" : "DOUBLE" },
                             "exp" : { "value" : 1.5e-3 , "type" : "DOUBLE" },
                             "big" : { "value" : 1E+2 , "type" : "DOUBLE" },
                             "intAsDouble" : { "value" : 7 , "type" : "DOUBLE" },
                             "nothing" : { "value" : null , "type" : "STRING" },
                             "list" : { "value" : [ ] , "type" : "INT64_LIST" } } } ] }
            """#
        let read = try Self.read(text)
        #expect(read == (try Self.decoded(text)))
        guard case .record(let record)? = read.records.first else {
            Issue.record("no record in \(read)")
            return
        }
        #expect(read.syncToken == #"a"b\c/d"#)
        #expect(record.recordName == "ré😀\n\t")
        #expect(record.fields["neg"].map { if case .double(let d) = $0 { d.sign == .minus && d == 0 } else { false } } == true, "-0 keeps its sign")
        #expect(record.fields["negDot"].map { if case .double(let d) = $0 { d.sign == .minus } else { false } } == true)
        #expect(record.fields["exp"] == .double(0.0015))
        #expect(record.fields["intAsDouble"] == .double(7))
    }

    @Test func valuesOfUnexpectedShapesReadAsJSONDecoderDecodesThem() throws {
        // The reader reads a value straight into its type when it has the expected shape, and
        // otherwise as any JSON: both ways must give what JSONDecoder gives.
        let text = #"""
            {"records":[{"recordName":"r","recordType":"Note","fields":{
              "ref":{"value":{"recordName":"a","action":"NONE"},"type":"REFERENCE"},
              "refZone":{"value":{"recordName":"a","zoneID":{"zoneName":"Z","zoneType":"REGULAR_CUSTOM_ZONE","extra":[1,{"x":null}]}},"type":"REFERENCE"},
              "refNumberAction":{"value":{"recordName":"a","action":3},"type":"REFERENCE"},
              "refZoneWithoutName":{"value":{"recordName":"a","zoneID":{"ownerRecordName":"o"}},"type":"REFERENCE"},
              "refNumberOwner":{"value":{"recordName":"a","zoneID":{"zoneName":"Z","ownerRecordName":7}},"type":"REFERENCE"},
              "refWithoutName":{"value":{"action":"NONE"},"type":"REFERENCE"},
              "intAsString":{"value":"12","type":"INT64"},
              "intAsDouble":{"value":1.5,"type":"INT64"},
              "intNegativeZero":{"value":-0,"type":"INT64"},
              "timeAsDouble":{"value":1700000000000.4,"type":"TIMESTAMP"},
              "stringAsNumber":{"value":5,"type":"STRING"},
              "bytesAsObject":{"value":{},"type":"BYTES"},
              "typeFirst":{"type":"STRING","value":"first"},
              "noType":{"value":"x"},
              "noValue":{"type":"STRING"},
              "futureType":{"value":{"a":[1,2]},"type":"FUTURE_TYPE"},
              "listWrongElement":{"value":["a",1],"type":"STRING_LIST"},
              "listNotArray":{"value":"a","type":"STRING_LIST"},
              "doubles":{"value":[1,2.5,-0.0],"type":"DOUBLE_LIST"},
              "refs":{"value":[{"recordName":"a"},{"recordName":"b","zoneID":{"zoneName":"Z"}}],"type":"REFERENCE_LIST"},
              "nestedList":{"value":[["a"]],"type":"STRING_LIST"}
            }}],"syncToken":"t"}
            """#
        let read = try Self.read(text)
        guard case .record(let record)? = read.records.first, case .record(let decoded)? = try Self.decoded(text).records.first else {
            Issue.record("no record in \(read)")
            return
        }
        for (name, value) in decoded.fields {
            #expect(record.fields[name] == value, "field \(name)")
        }
        #expect(record == decoded)
        #expect(record.fields["ref"] == .reference(Reference(recordName: "a", action: "NONE")))
        #expect(record.fields["refNumberAction"] == .reference(Reference(recordName: "a", action: nil)))
        #expect(record.fields["intAsString"] == .int64(12))
        #expect(record.fields["typeFirst"] == .string("first"))
        #expect(record.fields.count == 21)
    }

    /// An entry's reason, retry time or uuid of another type than CloudKit's is left out, by both
    /// readers: the entry is still the error (or record) it says it is, and the rest of the page
    /// is read, where one such member made the page malformed and its zone failed every run.
    @Test func oddMembersOfAnEntryAreLeftOutNotTakenForAMalformedPage() throws {
        let text = #"""
            {"records":[
              {"recordName":"a","serverErrorCode":"QUOTA_EXCEEDED","reason":7,"retryAfter":"soon","uuid":{"n":1}},
              {"recordName":"b","serverErrorCode":"THROTTLED","reason":"slow down","retryAfter":1e400,"uuid":[]},
              {"recordName":"c","serverErrorCode":"THROTTLED","retryAfter":2.5,"uuid":"u-1"},
              {"recordName":"d","recordType":"Note","reason":[1],"retryAfter":true,"fields":{}},
              {"recordName":"e","deleted":true,"uuid":5}
            ],"syncToken":"t"}
            """#
        let page = try Self.read(text)
        #expect(
            page.records == [
                .error(RecordError(recordName: "a", reason: nil, serverErrorCode: "QUOTA_EXCEEDED")),
                .error(RecordError(recordName: "b", reason: "slow down", serverErrorCode: "THROTTLED")),
                .error(RecordError(recordName: "c", reason: nil, serverErrorCode: "THROTTLED", retryAfter: 2.5, uuid: "u-1")),
                .record(Record(recordName: "d", recordType: "Note", fields: [:])),
                .deleted(recordName: "e"),
            ])
        #expect(page == (try Self.decoded(text)))

        let zones = #"""
            {"zones":[{"zoneID":{"zoneName":"A"},"serverErrorCode":"ZONE_NOT_FOUND","reason":7},
                      {"zoneID":{"zoneName":"B"},"deleted":true,"reason":{"x":[]}}],"syncToken":"d","moreComing":false}
            """#
        let database = try Array(zones.utf8).withUnsafeBufferPointer { bytes in
            var reader = JSONReader(bytes)
            return try DatabaseChangesResponse(reading: &reader)
        }
        #expect(
            database.zones == [
                ZoneChange(zoneID: ZoneID(zoneName: "A"), serverErrorCode: "ZONE_NOT_FOUND"),
                ZoneChange(zoneID: ZoneID(zoneName: "B"), deleted: true),
            ])
        #expect(database == (try JSONDecoder().decode(DatabaseChangesResponse.self, from: Data(zones.utf8))))
    }

    /// A reason or uuid whose bytes are not UTF-8 is left out as an odd one is, by both readers;
    /// the record beside it is read as it is, not as unreadable.
    @Test func aReasonThatIsNotUTF8IsLeftOutByBothReaders() throws {
        let bytes =
            Array(#"{"records":[{"recordName":"a","serverErrorCode":"X","reason":"b"#.utf8) + [0xFF]
            + Array(#"c","uuid":"d"},{"recordName":"e","recordType":"Note","reason":"f"#.utf8) + [0xFF]
            + Array(#"g","fields":{}}],"syncToken":"t"}"#.utf8)
        let page = try bytes.withUnsafeBufferPointer { buffer in
            var reader = JSONReader(buffer)
            return try RecordZoneChangesResponse(reading: &reader)
        }
        #expect(
            page.records == [
                .error(RecordError(recordName: "a", reason: nil, serverErrorCode: "X", uuid: "d")),
                .record(Record(recordName: "e", recordType: "Note", fields: [:])),
            ])
        #expect(page == (try JSONDecoder().decode(RecordZoneChangesResponse.self, from: Data(bytes))))
    }

    /// CloudKit writes the token after the records; a page with its token and `moreComing` first,
    /// far from the end, is read the same, as JSONDecoder reads it.
    @Test func aPageWithItsTokenFirstIsReadAsAnyOther() throws {
        let feed = FakeFeed(settings: FakeSettings(seed: 9, zones: 1, recordsPerZone: 400, badRecordEvery: 40))
        let records = String(decoding: try JSONEncoder().encode(feed.entries(zone: 0, range: 0..<400)), as: UTF8.self)
        let text = #"{"syncToken":"next\"token","moreComing":true,"records":\#(records)}"#
        #expect(text.utf8.count > 8192, "the token is far from the end")
        let page = try Self.read(text)
        #expect(page.syncToken == "next\"token")
        #expect(page.moreComing)
        #expect(page.records.count == 400)
        #expect(page == (try Self.decoded(text)))
    }

    /// Text that is not UTF-8 would have to be changed to be stored, and changed it may be
    /// another record's name or field: such an entry is read as unreadable, saying where, and
    /// the rest of the page is read as usual.
    @Test(arguments: [
        (#""recordName":"x\ud800y","deleted":true"#, "recordName is not valid UTF-8 text"),
        (#""recordName":"a","recordType":"Note","fields":{"title":{"value":"\udc00","type":"STRING"}}"#, "field title holds text that is not valid UTF-8"),
        (#""recordName":"a","recordType":"Note","fields":{"x\ud83dy":{"value":1,"type":"INT64"}}"#, "a field name is not valid UTF-8 text"),
        (#""recordName":"a","recordType":"Note\ud800""#, "recordType is not valid UTF-8 text"),
        (#""recordName":"a","recordType":"Note","created":{"timestamp":1e19}"#, "created.timestamp is 1e+19 ms, which no timestamp holds"),
    ])
    func anEntryThatCannotBeTakenAsSentIsUnreadableAndSaysWhy(members: String, problem: String) throws {
        let page = try Self.read(#"{"records":[{"# + members + #"},{"recordName":"ok","deleted":true}],"syncToken":"t"}"#)
        guard case .unreadable(let entry)? = page.records.first else {
            Issue.record("\(page.records)")
            return
        }
        #expect(entry.problem == problem)
        #expect(page.records.last == .deleted(recordName: "ok"), "the rest of the page is read")
    }

    /// A page read from its own bytes (as zonefeed reads a response) remembers the last zone it
    /// read by its bytes; each record still gets the zone its own bytes name.
    @Test func recordsNamingZonesInTheSameOrOtherBytesEachGetTheirOwnZone() throws {
        let zones = [
            #"{"zoneName":"A","ownerRecordName":"_o","zoneType":"REGULAR_CUSTOM_ZONE"}"#,
            #"{"zoneName":"A","ownerRecordName":"_o","zoneType":"REGULAR_CUSTOM_ZONE"}"#,
            #"{ "zoneName":"A","ownerRecordName":"_o","zoneType":"REGULAR_CUSTOM_ZONE"}"#,
            #"{"zoneName":"A"}"#,
            #"{"zoneName":"A","ownerRecordName":"_other"}"#,
            #"{"zoneName":"A"}"#,
            #"{"zoneName":"B","ownerRecordName":"_o","zoneType":"REGULAR_CUSTOM_ZONE"}"#,
            #"{"zoneName":"A\u00e9"}"#,
            #"{"zoneName":"A\u00e9"}"#,
            #"{"zoneName":"A\ud800"}"#,
            #"{"zoneName":"A\ud800"}"#,
            "{\"zoneName\":\"" + String(repeating: "z", count: 300) + "\"}",
            "{\"zoneName\":\"" + String(repeating: "z", count: 300) + "\"}",
        ]
        let records = zones.enumerated().map { #"{"recordName":"r\#($0.offset)","recordType":"Note","zoneID":\#($0.element)}"# }
        let text = #"{"records":["# + records.joined(separator: ",") + #"],"syncToken":"t"}"#
        var reader = JSONBytes.copying(Array(text.utf8)).reader()
        let page = try RecordZoneChangesResponse(reading: &reader)
        #expect(page.records.count == zones.count)
        // Each zone as a page of its own reads it.
        let expected: [ZoneID?] = zones.map { zone in
            let read = try? Self.read(#"{"records":[{"recordName":"r","recordType":"Note","zoneID":"# + zone + #"}],"syncToken":"t"}"#)
            guard case .record(let record)? = read?.records.first else { return nil }
            return record.zoneID
        }
        for (i, entry) in page.records.enumerated() {
            switch entry {
            case .record(let record):
                #expect(record.zoneID == expected[i], "record \(i), \(zones[i])")
            case .unreadable(let bad):
                // Repaired text is never remembered: each record that has it says so.
                #expect(expected[i] == nil)
                #expect(bad.problem == "zoneID is not valid UTF-8 text", "record \(i)")
            default:
                Issue.record("record \(i): \(entry)")
            }
        }
        #expect(expected[4]?.ownerRecordName == "_other")
        #expect(expected[5]?.ownerRecordName == ZoneID.defaultOwner)
        #expect(expected[6]?.zoneName == "B")
        #expect(page.records.filter { if case .unreadable = $0 { true } else { false } }.count == 2)
    }

    /// A page read from its own bytes remembers its stamps by their bytes around the timestamp's
    /// number (the user and the device); each record still gets the stamps its bytes spell.
    @Test func stampsWithTheSameOrOtherTailsEachGetTheirOwnUserAndDevice() throws {
        let long = String(repeating: "u", count: 200)
        var stamps = [
            #"{"timestamp":1,"userRecordName":"_u","deviceID":"D"}"#,
            #"{"timestamp":2,"userRecordName":"_u","deviceID":"D"}"#,
            #"{"timestamp":3.5,"userRecordName":"_u","deviceID":"D"}"#,
            #"{"timestamp":-0,"userRecordName":"_u","deviceID":"D"}"#,
            #"{"timestamp":4,"userRecordName":"_u","deviceID":"D","timestamp":5}"#,
            #"{"timestamp":6,"userRecordName":"_u","deviceID":"D","timestamp":5}"#,
            #"{"timestamp":7,"userRecordName":"_u","deviceID":"DD"}"#,
            #"{"timestamp":8,"deviceID":"D","userRecordName":"_u"}"#,
            #"{"timestamp":9,"deviceID":"D","userRecordName":"_u"}"#,
            #"{"timestamp":10,"userRecordName":null,"deviceID":"D"}"#,
            #"{"timestamp":11,"userRecordName":null,"deviceID":"D"}"#,
            #"{"timestamp":12,"userRecordName":"_u\u00e9","deviceID":"D"}"#,
            #"{"timestamp":13,"userRecordName":"_u\u00e9","deviceID":"D"}"#,
            #"{"timestamp":14,"userRecordName":"_u\ud800","deviceID":"D"}"#,
            #"{"timestamp":15,"userRecordName":"_u\ud800","deviceID":"D"}"#,
            #"{ "timestamp":16,"userRecordName":"_u","deviceID":"D"}"#,
            #"{"timestamp":17,"userRecordName":"_u","deviceID":"D","extra":[1]}"#,
            #"{"timestamp":18,"userRecordName":"_u","deviceID":"D","extra":[1]}"#,
            #"{"timestamp":19}"#, #"{"timestamp":20}"#, #"{"timestamp":21 }"#,
            #"{"timestamp":1e300,"userRecordName":"_u","deviceID":"D"}"#,
            #"{"timestamp":null,"userRecordName":"_u","deviceID":"D","timestamp":22}"#,
            #"{"timestamp":23,"userRecordName":""# + long + #"","deviceID":"D"}"#,
            #"{"timestamp":24,"userRecordName":""# + long + #"","deviceID":"D"}"#,
            // Members in another order (sorted, as JSONWriter writes them; the timestamp last).
            #"{"deviceID":"D","timestamp":30,"userRecordName":"_u"}"#, #"{"deviceID":"D","timestamp":31,"userRecordName":"_u"}"#,
            #"{"deviceID":"D","timestamp":32,"userRecordName":"_u","timestamp":33}"#,
            #"{"deviceID":"D","timestamp":34,"userRecordName":"_u","timestamp":33}"#,
            #"{"deviceID":"D","timestamp":35.5,"userRecordName":"_u"}"#, #"{"deviceID":"D","timestamp":-36,"userRecordName":"_u"}"#,
            #"{"deviceID":"D","deviceID":"E","timestamp":37,"userRecordName":"_u"}"#,
            #"{"deviceID":"D","deviceID":"E","timestamp":38,"userRecordName":"_u"}"#,
            #"{"userRecordName":"_u","deviceID":"D","timestamp":39}"#, #"{"userRecordName":"_u","deviceID":"D","timestamp":40}"#,
            #"{"deviceID":"DD","timestamp":41,"userRecordName":"_u"}"#, #"{"deviceID":"D","timestamp":42,"userRecordName":"_uu"}"#,
        ]
        // More stamps than a page remembers (32), each twice.
        stamps += (0..<40).flatMap { i in (0..<2).map { #"{"timestamp":\#(100 + $0),"userRecordName":"_u\#(i)","deviceID":"D"}"# } }
        stamps.append(#"{"timestamp":25,"userRecordName":"_u","deviceID":"D"}"#)
        let records = stamps.enumerated().map { i, stamp in
            #"{"recordName":"r\#(i)","recordType":"Note","created":\#(stamp),"modified":\#(stamps[stamps.count - 1 - i])}"#
        }
        let text = #"{"records":["# + records.joined(separator: ",") + #"],"syncToken":"t"}"#
        var reader = JSONBytes.copying(Array(text.utf8)).reader()
        let page = try RecordZoneChangesResponse(reading: &reader)
        #expect(page.records.count == stamps.count)
        for (i, entry) in page.records.enumerated() {
            // The record as a page of its own reads it, with nothing remembered.
            let alone = try Self.read(#"{"records":["# + records[i] + #"],"syncToken":"t"}"#).records.first
            switch (entry, alone) {
            case (.record(let record), .record(let expected)?):
                #expect(record.created == expected.created && record.modified == expected.modified, "record \(i): \(stamps[i])")
            case (.unreadable(let bad), .unreadable(let expected)?):
                #expect(bad.problem == expected.problem, "record \(i)")
            default:
                Issue.record("record \(i): \(entry) against \(String(describing: alone))")
            }
        }
        guard case .record(let second) = page.records[1], case .record(let last) = page.records[stamps.count - 1] else {
            Issue.record("records 1 and \(stamps.count - 1) are readable")
            return
        }
        #expect(second.created == RecordStamp(timestamp: 2, userRecordName: "_u", deviceID: "D"))
        #expect(last.created == RecordStamp(timestamp: 25, userRecordName: "_u", deviceID: "D"))
        #expect(page.records.filter { if case .unreadable = $0 { true } else { false } }.count >= 4)
    }

    /// A page read from its own bytes knows each record's member by the key at its place in the
    /// record before it; records whose members come in other orders, fewer or more of them, with
    /// spaces, escaped or repeated keys, members it does not know, deletions and errors among
    /// them, each read as the record alone reads it, with nothing remembered.
    @Test func recordsWithTheirMembersInAnyOrderEachReadAsTheyDoAlone() throws {
        let members = [
            #""recordType":"Note""#, #""recordChangeTag":"t1""#, #""fields":{"a":{"value":1,"type":"INT64"}}"#, #""pluginFields":{}"#,
            #""created":{"timestamp":1,"userRecordName":"_u","deviceID":"D"}"#,
            #""modified":{"timestamp":2,"userRecordName":"_u","deviceID":"D"}"#, #""deleted":false"#, #""zoneID":{"zoneName":"Z"}"#,
        ]
        let others = [
            #""record\u0054ype":"Folder""#, #" "recordType" : "Tag" "#, #""recordType":"Note","recordType":"Note""#, #""recordChangeTag" :"t2""#,
            #""fields":{}"#, #""unknown":[1,{"recordType":"x"}]"#, #""recordType":null"#, #""deleted":true"#,
            #""serverErrorCode":"NOT_FOUND","reason":"gone""#, #""retryAfter":3"#, #""uuid":"u""#, #""recordTypes":"Note""#,
        ]
        var seed: UInt64 = 26
        func next(_ bound: Int) -> Int {
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((seed >> 33) % UInt64(bound))
        }
        var order = members
        var records: [String] = []
        for i in 0..<400 {
            // Mostly the order of the record before; now and then another, or another member.
            switch next(6) {
            case 0:
                for j in order.indices.reversed() { order.swapAt(j, next(j + 1)) }
            case 1: order[next(order.count)] = others[next(others.count)]
            case 2: order.remove(at: next(order.count))
            case 3 where next(4) == 0: order += (0..<40).map { #""x\#($0)":\#($0)"# }
            case 4: order = members
            default: break
            }
            if order.isEmpty { order = members }
            var parts = order
            parts.insert(#""recordName":"r\#(i)""#, at: next(parts.count + 1))
            let record = "{" + parts.joined(separator: next(8) == 0 ? " , " : ",") + "}"
            // Not one that fails its whole page (a live record without a type).
            if (try? Self.read(#"{"records":["# + record + #"],"syncToken":"t"}"#)) != nil { records.append(record) }
        }
        let text = #"{"records":["# + records.joined(separator: ",") + #"],"syncToken":"t"}"#
        var reader = JSONBytes.copying(Array(text.utf8)).reader()
        let page = try RecordZoneChangesResponse(reading: &reader)
        #expect(page.records.count == records.count && records.count > 300)
        var kinds: Set<String> = []
        for (i, entry) in page.records.enumerated() {
            let alone = try Self.read(#"{"records":["# + records[i] + #"],"syncToken":"t"}"#).records.first
            #expect(entry == alone, "record \(i): \(records[i])")
            kinds.insert(String(describing: entry).prefix(while: { $0 != "(" }).description)
        }
        // Live records, deletions and errors were all among them.
        #expect(kinds.isSuperset(of: ["record", "deleted", "error"]), "\(kinds)")
    }

    @Test func invalidUTF8BytesInAStringAreUnreadableNotRepairedSilently() throws {
        var bytes = Array(#"{"records":[{"recordName":"a","recordType":"Note","fields":{"title":{"value":"x"#.utf8)
        bytes += [0xFF, 0xFE, 0xC0, 0x80, 0xED, 0xA0, 0x80]  // not UTF-8; an overlong NUL; an encoded surrogate
        bytes += Array(#"","type":"STRING"}}}],"syncToken":"t"}"#.utf8)
        let page = try bytes.withUnsafeBufferPointer { buffer in
            var reader = JSONReader(buffer)
            return try RecordZoneChangesResponse(reading: &reader)
        }
        guard case .unreadable(let entry)? = page.records.first else {
            Issue.record("\(page.records)")
            return
        }
        #expect(entry.problem == "field title holds text that is not valid UTF-8")
    }

    /// An entry of valid JSON but no shape CloudKit sends (no name, no type, a type that is a
    /// number, a field that is not an object, a stamp given as text, not an object at all) is an
    /// unreadable entry, a reject, and the rest of the page is read:
    /// it made the whole page malformed, and its zone failed at that page on every run.
    @Test func anEntryOfNoShapeCloudKitSendsIsUnreadableAndTheRestOfThePageIsRead() throws {
        let odd = [
            #"{"recordType":"Note","fields":{}}"#, #"{"recordName":"no-type","fields":{}}"#,
            #"{"recordName":"type-5","recordType":"Note","fields":{"u":{"value":1,"type":5}}}"#,
            #"{"recordName":"field-list","recordType":"Note","fields":{"u":[1]}}"#,
            #"{"recordName":"stamp-text","recordType":"Note","created":{"timestamp":"yesterday"}}"#,
            #"{"recordName":"zone-nameless","recordType":"Note","zoneID":{"ownerRecordName":"_o"}}"#,
            #"{"deleted":true}"#, #"{"recordName":5,"recordType":"Note"}"#, #"7"#, #"["a"]"#,
        ]
        let text =
            #"{"records":[{"recordName":"first","recordType":"Note","fields":{}},"#
            + odd.joined(separator: ",") + #",{"recordName":"last","deleted":true}],"syncToken":"t","moreComing":true}"#
        let page = try Self.read(text)
        #expect(page.syncToken == "t" && page.moreComing)
        #expect(page.records.count == odd.count + 2)
        #expect(page.records.first == .record(Record(recordName: "first", recordType: "Note", fields: [:])))
        #expect(page.records.last == .deleted(recordName: "last"))
        for (entry, json) in zip(page.records.dropFirst().dropLast(), odd) {
            guard case .unreadable(let unreadable) = entry else {
                Issue.record("\(json) was read as \(entry)")
                continue
            }
            #expect(unreadable.json == (try Array(json.utf8).withUnsafeBytes { try JSONValue(parsing: $0) }), "kept as it came, for the reject's raw")
            #expect(unreadable.problem.hasPrefix("the entry is not one CloudKit sends ("), "\(unreadable.problem)")
        }
        let names = page.records.map(\.nameOfARecordStillThere)
        #expect(names == ["first", nil, "no-type", "type-5", "field-list", "stamp-text", "zone-nameless", nil, nil, nil, nil, nil])
        // JSONDecoder, which pages are not read with, still refuses such a page.
        #expect(throws: (any Error).self) { try Self.decoded(text) }
    }

    /// What only a live record has (its zone, stamps, change tag, fields), of a shape no record
    /// has, is nothing to a deletion or an error entry: they are what they say, by both readers,
    /// as JSONDecoder never read those members for them (FuzzPageDecoder found a deletion with
    /// a zoneID without its name read as a deletion by one and a reject by the other).
    @Test func whatOnlyARecordHasIsNothingToADeletionOrAnErrorEntry() throws {
        let text = #"""
            {"records":[
              {"recordName":"gone","deleted":true,"zoneID":{"owner":"_o"},"created":{"timestamp":1e19},"recordChangeTag":5},
              {"recordName":"err","serverErrorCode":"THROTTLED","deleted":1,"fields":[1],"modified":{"timestamp":"now"}},
              {"recordName":"rec","recordType":"Note","zoneID":{"owner":"_o"},"fields":{}}
            ],"syncToken":"t"}
            """#
        let page = try Self.read(text)
        #expect(page.records.count == 3)
        #expect(page.records.first == .deleted(recordName: "gone"))
        #expect(page.records.dropFirst().first == .error(RecordError(recordName: "err", reason: nil, serverErrorCode: "THROTTLED")))
        guard case .unreadable(let record)? = page.records.last else {
            Issue.record("\(page.records)")
            return
        }
        #expect(record.recordName == "rec" && record.problem.hasPrefix("the entry is not one CloudKit sends ("), "\(record)")
        // The deletion and the error entry as JSONDecoder reads them (which refuses the record).
        let alone = text.replacingOccurrences(of: #",\#n  {"recordName":"rec","recordType":"Note","zoneID":{"owner":"_o"},"fields":{}}"#, with: "")
        #expect(alone != text)
        #expect(page.records.dropLast().map(\.json) == (try Self.decoded(alone)).records.map(\.json), "JSONDecoder reads them alike")
    }

    @Test(arguments: [
        #"{"records":[{"recordName":"a","recordType":"Note"}],"syncToken":"t""#,
        #"{"records":[],"syncToken":"t"} trailing"#,
        #"{"records":[{"recordName":"a","recordType":"Note",}],"syncToken":"t"}"#,
        #"{"records":[],"moreComing":false}"#,
        #"{"records":[{"recordName":"a\u12"}],"syncToken":"t"}"#,
        #"{"records":[{"recordName":01}],"syncToken":"t"}"#,
        "{\"records\":[],\"syncToken\":\"a\u{01}b\"}",
        String(repeating: "[", count: 600),
    ])
    func malformedPagesAreRefusedByBoth(text: String) {
        #expect(throws: (any Error).self) { try Self.read(text) }
        // Foundation's JSONDecoder takes a comma before a closing brace, which JSON does not.
        if !text.contains(",}") { #expect(throws: (any Error).self) { try Self.decoded(text) } }
    }
}

/// A page in CloudKit's wire form, through the model's `Encodable` conformances.
private struct WirePage: Encodable {
    var records: [RecordEntry]
    var syncToken: String
    var moreComing: Bool
    init(_ page: RecordZoneChangesResponse) {
        records = page.records
        syncToken = page.syncToken
        moreComing = page.moreComing
    }
}
