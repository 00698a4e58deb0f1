import CloudKitWebServices
import Foundation
import Testing

@Suite struct DecodingTests {
    static let everyFieldType = #"""
        {"records":[
          {"recordName":"n1","recordType":"Note","recordChangeTag":"tag7",
           "created":{"timestamp":1700000000000,"userRecordName":"_alice","deviceID":"d1"},
           "modified":{"timestamp":1700000000500,"userRecordName":"_bob"},
           "zoneID":{"zoneName":"Notes","ownerRecordName":"_alice","zoneType":"REGULAR_CUSTOM_ZONE"},
           "pluginFields":{},
           "fields":{
             "title":{"value":"Grüße, 世界","type":"STRING"},
             "beyondDouble":{"value":9007199254740993,"type":"INT64"},
             "maxInt":{"value":9223372036854775807,"type":"INT64"},
             "minInt":{"value":-9223372036854775808,"type":"INT64"},
             "asString":{"value":"9007199254740995","type":"INT64"},
             "ratio":{"value":0.1,"type":"DOUBLE"},
             "when":{"value":-62135596800000,"type":"TIMESTAMP"},
             "blob":{"value":"AAEC/w==","type":"BYTES"},
             "secret":{"value":"c2VjcmV0","type":"ENCRYPTED_BYTES"},
             "folder":{"value":{"recordName":"f1","zoneID":{"zoneName":"Notes","ownerRecordName":"_alice"},"action":"DELETE_SELF"},"type":"REFERENCE"},
             "file":{"value":{"fileChecksum":"abc","size":12,"downloadURL":"https://example.invalid/a"},"type":"ASSETID"},
             "place":{"value":{"latitude":52.5,"longitude":13.4,"altitude":34},"type":"LOCATION"},
             "tags":{"value":["a","b"],"type":"STRING_LIST"},
             "counts":{"value":[1,9007199254740993],"type":"INT64_LIST"},
             "future":{"value":{"x":[1,2]},"type":"FANCY_NEW_TYPE"},
             "unknownList":{"value":[true],"type":"UNKNOWN_LIST"}
           }},
          {"recordName":"gone","deleted":true,"zoneID":{"zoneName":"Notes","ownerRecordName":"_alice"}},
          {"recordName":"bad","reason":"record too large","serverErrorCode":"QUOTA_EXCEEDED","uuid":"u1"}
        ],"syncToken":"zone-token-2","moreComing":null}
        """#

    @Test func zonePageDecodesEveryFieldTypeExactly() async throws {
        try await withServer { server, client in
            server.enqueue(.json(200, Self.everyFieldType))
            let page = try await client.fetchRecordZoneChanges(zoneID: ZoneID(zoneName: "Notes"), syncToken: nil)
            #expect(page.syncToken == "zone-token-2")
            #expect(page.moreComing == false, "moreComing: null counts as false")
            #expect(page.records.count == 3)

            guard case .record(let record) = page.records[0] else {
                Issue.record("the first entry is not a record: \(page.records[0])")
                return
            }
            #expect(record.recordType == "Note")
            #expect(record.recordChangeTag == "tag7")
            #expect(record.created == RecordStamp(timestamp: 1_700_000_000_000, userRecordName: "_alice", deviceID: "d1"))
            #expect(record.modified?.timestamp == 1_700_000_000_500)
            #expect(record.zoneID?.ownerRecordName == "_alice")
            let f = record.fields
            #expect(f["title"] == .string("Grüße, 世界"))
            #expect(f["beyondDouble"] == .int64(9_007_199_254_740_993), "2^53 + 1 survives without rounding")
            #expect(f["maxInt"] == .int64(.max))
            #expect(f["minInt"] == .int64(.min))
            #expect(f["asString"] == .int64(9_007_199_254_740_995))
            #expect(f["ratio"] == .double(0.1))
            #expect(f["when"] == .timestamp(-62_135_596_800_000))
            #expect(f["blob"] == .bytes("AAEC/w=="))
            #expect(f["secret"] == .encryptedBytes("c2VjcmV0"))
            #expect(f["folder"] == .reference(Reference(recordName: "f1", zoneID: ZoneID(zoneName: "Notes", ownerRecordName: "_alice"), action: "DELETE_SELF")))
            #expect(f["file"]?.typeTag == "ASSETID")
            #expect(f["place"]?.typeTag == "LOCATION")
            #expect(f["tags"] == .list(tag: "STRING_LIST", [.string("a"), .string("b")]))
            #expect(f["counts"] == .list(tag: "INT64_LIST", [.int64(1), .int64(9_007_199_254_740_993)]))
            #expect(f["future"] == .unknown(tag: "FANCY_NEW_TYPE", .object(["x": .array([.int(1), .int(2)])])), "unknown types are kept as sent")
            #expect(f["unknownList"]?.typeTag == "UNKNOWN_LIST")

            #expect(page.records[1] == .deleted(recordName: "gone"), "a tombstone has no recordType and still decodes")
            guard case .error(let error) = page.records[2] else {
                Issue.record("the third entry is not an error: \(page.records[2])")
                return
            }
            #expect(error.serverErrorCode == "QUOTA_EXCEEDED")
            #expect(error.recordName == "bad")
            #expect(error.reason == "record too large")
        }
    }

    @Test func zoneRequestOmitsTheMissingTokenAndCarriesLimitsAndKeys() async throws {
        try await withServer { server, client in
            server.enqueue(.json(200, emptyPage), .json(200, emptyPage))
            _ = try await client.fetchRecordZoneChanges(zoneID: ZoneID(zoneName: "Notes"), syncToken: nil, resultsLimit: 50, desiredKeys: ["title"])
            _ = try await client.fetchRecordZoneChanges(zoneID: ZoneID(zoneName: "Notes", ownerRecordName: "_bob"), syncToken: "tok/1")

            let first = try #require(server.requests.first)
            #expect(first.method == .POST)
            #expect(first.path == "/database/1/iCloud.com.example.notes/development/private/records/changes")
            let body = try JSONDecoder().decode(JSONValue.self, from: Data(first.body))
            #expect(
                body
                    == .object([
                        "zoneID": .object(["zoneName": .string("Notes")]),
                        "resultsLimit": .int(50), "desiredKeys": .array([.string("title")]),
                    ]), "no syncToken key on a first fetch; the default owner is left to the server")

            let second = try JSONDecoder().decode(JSONValue.self, from: Data(server.requests[1].body))
            #expect(
                second
                    == .object([
                        "zoneID": .object(["zoneName": .string("Notes"), "ownerRecordName": .string("_bob")]),
                        "syncToken": .string("tok/1"),
                    ]))
        }
    }

    @Test func databaseFeedReportsDeletedPurgedAndResetZones() async throws {
        try await withServer { server, client in
            server.enqueue(
                .json(
                    200,
                    #"""
                    {"zones":[
                      {"zoneID":{"zoneName":"A","ownerRecordName":"_o","zoneType":"REGULAR_CUSTOM_ZONE"}},
                      {"zoneID":{"zoneName":"B","ownerRecordName":"_o"},"deleted":true},
                      {"zoneID":{"zoneName":"C","ownerRecordName":"_o"},"purged":true},
                      {"zoneID":{"zoneName":"D","ownerRecordName":"_o"},"encryptedDataReset":true}
                    ],"syncToken":"db-2","moreComing":true}
                    """#))
            let page = try await client.fetchDatabaseChanges(syncToken: "db-1")
            #expect(page.syncToken == "db-2")
            #expect(page.moreComing)
            #expect(page.zones.map(\.zoneID.zoneName) == ["A", "B", "C", "D"])
            #expect(page.zones.map(\.deleted) == [false, true, false, false])
            #expect(page.zones.map(\.purged) == [false, false, true, false])
            #expect(page.zones.map(\.encryptedDataReset) == [false, false, false, true])
            let request = try #require(server.requests.first)
            #expect(request.path.hasSuffix("/private/changes/database"))
            #expect(try JSONDecoder().decode(JSONValue.self, from: Data(request.body)) == .object(["syncToken": .string("db-1")]))
        }
    }

    @Test func callerIsReadFromTheUsersListOrAFlatIdentity() async throws {
        try await withServer { server, client in
            server.enqueue(
                .json(
                    200, #"{"users":[{"userRecordName":"_alice","nameComponents":{"givenName":"Alice"},"lookupInfo":{"emailAddress":"a@example.invalid"}}]}"#),
                .json(200, #"{"userRecordName":"_bob","firstName":"Bob"}"#))
            let alice = try await client.caller()
            #expect(alice == UserIdentity(userRecordName: "_alice", givenName: "Alice", emailAddress: "a@example.invalid"))
            #expect(try await client.caller().userRecordName == "_bob")
            let request = try #require(server.requests.first)
            #expect(request.method == .GET)
            #expect(request.path == "/database/1/iCloud.com.example.notes/development/public/users/caller")
        }
    }

    /// An error entry of a type the client does not expect in a member is an error entry
    /// still, not a malformed answer.
    @Test func zoneListKeepsZonesAndTheirTokens() async throws {
        try await withServer { server, client in
            server.enqueue(
                .json(
                    200,
                    #"""
                    {"zones":[{"zoneID":{"zoneName":"_defaultZone","ownerRecordName":"_o"}},
                              {"zoneID":{"zoneName":"Notes","ownerRecordName":"_o"},"syncToken":"now","atomic":true},
                              {"zoneID":{"zoneName":"Broken"},"serverErrorCode":"ACCESS_DENIED","reason":"no"},
                              {"zoneID":{"zoneName":"Odd"},"serverErrorCode":"ACCESS_DENIED","retryAfter":"soon","uuid":7,"reason":null}]}
                    """#))
            let zones = try await client.listZones()
            #expect(
                zones == [
                    ZoneInfo(zoneID: ZoneID(zoneName: "_defaultZone", ownerRecordName: "_o")),
                    ZoneInfo(zoneID: ZoneID(zoneName: "Notes", ownerRecordName: "_o"), syncToken: "now", atomic: true),
                ])
            #expect(server.requests.first?.method == .GET)
            #expect(server.requests.first?.path.hasSuffix("/private/zones/list") == true)
        }
    }
}
