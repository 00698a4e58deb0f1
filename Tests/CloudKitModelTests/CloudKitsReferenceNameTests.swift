import Testing

@testable import CloudKitModel

/// `JSONReader.cloudKitsReferenceName` reads a reference written in CloudKit's order, every
/// optional member there or not, and leaves any other form where it found it, for the reading
/// member by member (which `FieldsStraightFromJSONTests` holds to the model's).
struct CloudKitsReferenceNameTests {
    /// The name's text and whether it has an escape, and where the reader stopped; nil and 0 when
    /// the form is not CloudKit's.
    static func read(_ json: String) throws -> (name: String, escaped: Bool, end: Int)? {
        let bytes = Array(json.utf8)
        return try bytes.withUnsafeBufferPointer { buffer in
            var reader = JSONReader(buffer)
            guard let name = try reader.cloudKitsReferenceName() else {
                #expect(reader.position == 0, "\(json)")
                return nil
            }
            return (String(decoding: name.bytes, as: UTF8.self), name.escaped, reader.position)
        }
    }

    @Test func everyMemberOfCloudKitsOrderThereOrNot() throws {
        let zones = [
            "", #","zoneID":{"zoneName":"Z"}"#, #","zoneID":{"zoneName":"Z","ownerRecordName":"_o"}"#,
            #","zoneID":{"zoneName":"Z","zoneType":"T"}"#, #","zoneID":{"zoneName":"Z","ownerRecordName":"_o","zoneType":"T"}"#,
        ]
        for zone in zones {
            for action in ["", #","action":"NONE""#] {
                let json = #"{"recordName":"A-1""# + zone + action + "}"
                let read = try Self.read(json + ",next")
                #expect(read?.name == "A-1", "\(json)")
                #expect(read?.escaped == false)
                #expect(read?.end == json.utf8.count, "past the closing brace, no further: \(json)")
            }
        }
        let escaped = try Self.read(#"{"recordName":"a\"b","action":"NONE"}"#)
        #expect(escaped?.name == #"a\"b"# && escaped?.escaped == true, "the name as written, its escapes undone by the writer")
    }

    @Test func anyOtherFormIsLeftWhereItWas() throws {
        for json in [
            #"{"action":"NONE","recordName":"n"}"#, #"{"recordName":5}"#, #"{ "recordName":"n"}"#, #"{"recordName":"n" }"#,
            #"{"recordName":"n","action":5}"#, #"{"recordName":"n","action":"NONE","recordName":"m"}"#,
            #"{"recordName":"n","zoneID":{"zoneName":5}}"#, #"{"recordName":"n","zoneID":{"ownerRecordName":"_o"}}"#,
            #"{"recordName":"n","zoneID":{"zoneName":"Z","ownerRecordName":null}}"#,
            #"{"recordName":"n","zoneID":{"zoneName":"Z","zoneType":"T","ownerRecordName":"_o"}}"#,
            #"{"recordName":"n","zoneID":{"zoneName":"Z","extra":1}}"#, #"{"recordName":"n","extra":1}"#,
            #"{"recordName":"n","action":"NONE","zoneID":{"zoneName":"Z"}}"#, #"["recordName"]"#, #"{"recordName""#,
        ] {
            #expect(try Self.read(json) == nil, "\(json)")
        }
    }
}
