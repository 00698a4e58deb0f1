import CloudKitModel
import CloudKitWebServices
import Foundation
import Testing

/// `records/query` as the client sends and reads it: the public database's only way in.
@Suite struct QueryEndpointTests {
    func json(_ bytes: [UInt8]) throws -> JSONValue { try JSONDecoder().decode(JSONValue.self, from: Data(bytes)) }

    @Test func aQueryAsksForOneTypeOnModificationAndReadsItsPageAndMarker() async throws {
        try await withServer(configure: { $0.database = .public }) { server, client in
            let answer =
                #"{"records":[{"recordName":"A","recordType":"Note","recordChangeTag":"t1","fields":{},"modified":{"timestamp":1700000000123}},"#
                + #"{"recordName":"B","serverErrorCode":"ACCESS_DENIED","reason":"no"}],"continuationMarker":"m+1/="}"#
            server.enqueue(.json(200, answer), .json(200, #"{"records":[]}"#))
            let first = try await client.queryRecords(
                recordType: "Note", filters: [ModificationFilter(.greaterThanOrEquals, 1_700_000_000_000)], resultsLimit: 200)
            #expect(first.continuationMarker == "m+1/=")
            #expect(first.records.count == 2)
            #expect(first.byteCount == answer.utf8.count, "the bytes of the answer, which its records keep")
            if case .record(let record)? = first.records.first {
                #expect(record.recordName == "A")
                #expect(record.modified?.timestamp == 1_700_000_000_123)
            } else {
                Issue.record("the first entry is a record: \(first.records)")
            }
            let last = try await client.queryRecords(recordType: "Note", sort: nil, continuationMarker: "m+1/=", desiredKeys: [])
            #expect(last.continuationMarker == nil, "the last page has no marker")

            #expect(server.requests.map(\.path) == Array(repeating: "/database/1/iCloud.com.example.notes/development/public/records/query", count: 2))
            let sent = try json(server.requests[0].body)
            #expect(sent["zoneID"] == nil, "the _defaultZone unless told")
            #expect(sent["resultsLimit"] == .int(200))
            #expect(
                sent["query"]
                    == .object([
                        "recordType": .string("Note"),
                        "filterBy": .array([
                            .object([
                                "systemFieldName": .string("modifiedTimestamp"), "comparator": .string("GREATER_THAN_OR_EQUALS"),
                                "fieldValue": .object(["value": .int(1_700_000_000_000), "type": .string("TIMESTAMP")]),
                            ])
                        ]),
                        "sortBy": .array([.object(["systemFieldName": .string("modifiedTimestamp"), "ascending": .bool(true)])]),
                    ]))
            let second = try json(server.requests[1].body)
            #expect(second["continuationMarker"] == .string("m+1/="))
            #expect(second["desiredKeys"] == .array([]), "names only")
            #expect(second["query"]?["sortBy"] == nil)
        }
    }

    /// A continuation marker of megabytes is an answer CloudKit does not send: each marker goes
    /// into the position written with every batch. One at the limit is taken.
    @Test func aMarkerPastSixtyFourKiBIsRefused() async throws {
        try await withServer(configure: {
            $0.database = .public
            $0.retry.maxAttempts = 1
        }) { server, client in
            let limit = String(repeating: "m", count: 64 * 1024)
            server.enqueue(.json(200, #"{"records":[],"continuationMarker":"\#(limit)"}"#), .json(200, #"{"records":[],"continuationMarker":"\#(limit)m"}"#))
            let taken = try await client.queryRecords(recordType: "Note", sort: nil, continuationMarker: nil, desiredKeys: [])
            #expect(taken.continuationMarker == limit)
            let refusal = await #expect(throws: CloudKitError.self) {
                try await client.queryRecords(recordType: "Note", sort: nil, continuationMarker: nil, desiredKeys: [])
            }
            #expect(refusal?.description.contains("a continuationMarker of 65537 bytes, more than the 64 KiB") == true, "\(String(describing: refusal))")
        }
    }
}
