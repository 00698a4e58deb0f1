import CloudKitModel
import FakeCloudKit
import FakeCloudKitServer
import Foundation
import Testing

/// `records/query` on the fake, read as the public database is read: by record type, on
/// `modifiedTimestamp`, page by page, with CloudKit's index lag and index requirements.
@Suite struct QueryTests {
    typealias Harness = FakeServerHarness

    static let settings = FakeSettings(seed: 7, zones: 2, recordsPerZone: 300, pageSize: 50)

    static func configuration(publicRecords: Int = 0, indexLag: ClosedRange<Int> = 0...0) -> FakeCloudKitServer.Configuration {
        var configuration = Harness.configuration(settings: settings)
        configuration.publicRecords = publicRecords
        configuration.indexLag = indexLag
        return configuration
    }

    /// A query of `recordType` sorted by modification, `filters` as (comparator, milliseconds).
    static func query(
        _ recordType: String, filters: [(String, Int64)] = [], sorted: Bool = true, limit: Int = 200, marker: String? = nil,
        desiredKeys: [String]? = nil, zone: String? = nil
    ) -> JSONValue {
        var query: [String: JSONValue] = ["recordType": .string(recordType)]
        if !filters.isEmpty {
            query["filterBy"] = .array(
                filters.map { comparator, value in
                    .object([
                        "systemFieldName": .string("modifiedTimestamp"), "comparator": .string(comparator),
                        "fieldValue": .object(["value": .int(value), "type": .string("TIMESTAMP")]),
                    ])
                })
        }
        if sorted { query["sortBy"] = .array([.object(["systemFieldName": .string("modifiedTimestamp"), "ascending": .bool(true)])]) }
        var body: [String: JSONValue] = ["query": .object(query), "resultsLimit": .int(Int64(limit))]
        if let marker { body["continuationMarker"] = .string(marker) }
        if let desiredKeys { body["desiredKeys"] = .array(desiredKeys.map(JSONValue.string)) }
        if let zone { body["zoneID"] = .object(["zoneName": .string(zone)]) }
        return .object(body)
    }

    /// Every page of a query, followed by its continuation markers: the records in the order
    /// they came, and how many requests that took.
    static func all(
        _ server: Harness, database: String = "public", _ recordType: String, filters: [(String, Int64)] = [], sorted: Bool = true,
        limit: Int = 200, desiredKeys: [String]? = nil
    ) async throws -> (records: [JSONValue], requests: Int) {
        var records: [JSONValue] = []
        var marker: String?
        var requests = 0
        repeat {
            let answer = try await server.cloudKit(
                "records/query", database: database,
                body: query(recordType, filters: filters, sorted: sorted, limit: limit, marker: marker, desiredKeys: desiredKeys))
            requests += 1
            let json = answer.json  // decoded once: a page of records is large
            guard answer.status == 200, case .array(let page)? = json?["records"] else {
                throw Harness.HarnessError("records/query answered \(answer.status): \(String(decoding: answer.bytes, as: UTF8.self))")
            }
            #expect(page.count <= limit)
            records += page
            marker = json?["continuationMarker"]?.stringValue
        } while marker != nil && requests < 10_000
        return (records, requests)
    }

    static func modified(_ record: JSONValue) -> Int64? {
        if case .int(let ms)? = record["modified"]?["timestamp"] { return ms }
        return nil
    }

    @Test func aQueryPagesThroughEveryLiveRecordOfItsTypeInModificationOrder() async throws {
        try await Harness.with(Self.configuration(publicRecords: 1_200)) { server in
            var publicSettings = Self.settings
            publicSettings.zones = 1
            publicSettings.recordsPerZone = 1_200
            let expected = ExpectedState(settings: publicSettings, mappedTypes: ["Note"], isRejected: { _ in false }).rows.values.filter { !$0.deleted }
            #expect(expected.count > 200, "more than a page")

            let (records, requests) = try await Self.all(server, "Note", limit: 200)
            #expect(requests == (expected.count + 199) / 200)
            #expect(records.count == expected.count)
            #expect(Set(records.compactMap { $0["recordName"]?.stringValue }) == Set(expected.map(\.record.recordName)))
            #expect(records.allSatisfy { $0["recordType"]?.stringValue == "Note" && $0["zoneID"]?["zoneName"]?.stringValue == "_defaultZone" })
            let times = records.compactMap(Self.modified)
            #expect(times.count == records.count)
            #expect(times == times.sorted(), "ascending modifiedTimestamp")
            let tags = Dictionary(uniqueKeysWithValues: expected.map { ($0.record.recordName, $0.record.recordChangeTag) })
            #expect(records.allSatisfy { tags[$0["recordName"]?.stringValue ?? ""] == $0["recordChangeTag"]?.stringValue }, "each record's live version")

            // A filter on the modification keeps exactly the records at or after it.
            let middle = times[times.count / 2]
            let later = try await Self.all(server, "Note", filters: [("GREATER_THAN_OR_EQUALS", middle)]).records.compactMap(Self.modified)
            #expect(later == times.filter { $0 >= middle })
            let before = try await Self.all(server, "Note", filters: [("LESS_THAN", middle)]).records.compactMap(Self.modified)
            #expect(before == times.filter { $0 < middle })

            // Names only: no fields, as a deletion sweep asks.
            let names = try await Self.all(server, "Note", sorted: false, desiredKeys: []).records
            #expect(names.count == expected.count)
            #expect(names.allSatisfy { ($0["fields"].map { $0 == .object([:]) } ?? true) })
        }
    }

    @Test func recordsWithOneTimestampArePagedOnceEachAndNotInNameOrder() async throws {
        try await Harness.with(Self.configuration()) { server in
            let stamp: Int64 = 1_800_000_000_000
            let names = (0..<450).map { String(format: "TIE-%03d", $0) }
            let records: [JSONValue] = names.map { name in
                .object([
                    "recordName": .string(name), "recordType": .string("Tag"), "fields": .object([:]),
                    "modified": .object(["timestamp": .int(stamp)]),
                ])
            }
            _ = try await server.admin("records/add", .object(["database": .string("public"), "zone": .string("_defaultZone"), "records": .array(records)]))
            let (found, requests) = try await Self.all(server, "Tag", filters: [("GREATER_THAN_OR_EQUALS", stamp)], limit: 200)
            #expect(requests == 3)
            let foundNames = found.compactMap { $0["recordName"]?.stringValue }
            #expect(foundNames.count == names.count)
            #expect(Set(foundNames) == Set(names))
            #expect(foundNames != names, "the server's own order among equal times, not the names'")
        }
    }

    @Test func anAddedRecordOrDeletionIsUnseenUntilItsIndexLagHasPassed() async throws {
        try await Harness.with(Self.configuration(publicRecords: 300, indexLag: 600_000...600_000)) { server in
            // Ten minutes of lag: neither a new record nor a deletion is in the index yet.
            let before = try await Self.all(server, "Tag").records.compactMap { $0["recordName"]?.stringValue }
            let gone = try #require(before.first, "the generator made tags")
            let record: JSONValue = .object(["recordName": .string("LATE"), "recordType": .string("Tag"), "fields": .object([:])])
            _ = try await server.admin("records/add", .object(["database": .string("public"), "zone": .string("_defaultZone"), "records": .array([record])]))
            _ = try await server.admin(
                "records/delete", .object(["database": .string("public"), "zone": .string("_defaultZone"), "recordNames": .array([.string(gone)])]))
            let after = try await Self.all(server, "Tag").records.compactMap { $0["recordName"]?.stringValue }
            #expect(Set(after) == Set(before), "the index still shows what it showed: \(gone) and not LATE")
        }
        try await Harness.with(Self.configuration(indexLag: 300...300)) { server in
            let record: JSONValue = .object(["recordName": .string("SOON"), "recordType": .string("Tag"), "fields": .object([:])])
            // Timed from before the add: the lag starts when the server appends, after this.
            let added = ContinuousClock.now
            _ = try await server.admin("records/add", .object(["database": .string("public"), "zone": .string("_defaultZone"), "records": .array([record])]))
            var seenAfter: Duration?
            while seenAfter == nil, ContinuousClock.now - added < .seconds(60) {
                if try await Self.all(server, "Tag").records.count == 1 { seenAfter = ContinuousClock.now - added }
                try await Task.sleep(for: .milliseconds(20))
            }
            let seen = try #require(seenAfter, "the record was seen once its lag had passed")
            #expect(seen >= .milliseconds(300))
        }
    }

    @Test func aQueryNeedingAnIndexTheTypeLacksIsRefusedNamingIt() async throws {
        try await Harness.with(Self.configuration(publicRecords: 300)) { server in
            _ = try await server.admin(
                "indexes/set", .object(["database": .string("public"), "recordType": .string("Note"), "queryable": .array([]), "sortable": .array([])]))
            let cases: [(JSONValue, String)] = [
                (Self.query("Note", filters: [("GREATER_THAN", 0)], sorted: false), "Field '___modTime' is not marked queryable"),
                (Self.query("Note", filters: [], sorted: true), "Field '___modTime' is not marked sortable"),
                (Self.query("Note", filters: [], sorted: false), "Field '___recordID' is not marked queryable"),
            ]
            for (body, reason) in cases {
                let answer = try await server.cloudKit("records/query", database: "public", body: body)
                #expect(answer.status == 400)
                #expect(answer.json?["serverErrorCode"]?.stringValue == "BAD_REQUEST")
                #expect(answer.json?["reason"]?.stringValue?.hasPrefix(reason) == true, "\(answer.json?["reason"]?.stringValue ?? "")")
            }
            // Another type keeps every index.
            #expect(try await server.cloudKit("records/query", database: "public", body: Self.query("Folder", filters: [("GREATER_THAN", 0)])).status == 200)
        }
    }

    @Test func aContinuationMarkerBelongsToItsQuery() async throws {
        try await Harness.with(Self.configuration(publicRecords: 1_200)) { server in
            let first = try await server.cloudKit("records/query", database: "public", body: Self.query("Note", limit: 10))
            let marker = try #require(first.json?["continuationMarker"]?.stringValue)
            let other = try await server.cloudKit("records/query", database: "public", body: Self.query("Folder", limit: 10, marker: marker))
            #expect(other.status == 400)
            #expect(other.json?["reason"]?.stringValue == "continuationMarker does not belong to this query")
        }
    }

    @Test func eachDatabaseHasADefaultZoneThatQueriesReadAndChangeFeedsRefuse() async throws {
        try await Harness.with(Self.configuration()) { server in
            let record: JSONValue = .object(["recordName": .string("PRIVATE-DEFAULT"), "recordType": .string("Tag"), "fields": .object([:])])
            _ = try await server.admin("records/add", .object(["zone": .string("_defaultZone"), "records": .array([record])]))
            let found = try await Self.all(server, database: "private", "Tag").records
            #expect(found.compactMap { $0["recordName"]?.stringValue } == ["PRIVATE-DEFAULT"])
            #expect(try await Self.all(server, "Tag").records.isEmpty, "the public database's default zone is another")
            let changes = try await server.cloudKit("records/changes", body: .object(["zoneID": .object(["zoneName": .string("_defaultZone")])]))
            #expect(changes.status == 400)
            let zones = try await server.cloudKit("zones/list", method: "GET")
            #expect(!(String(decoding: zones.bytes, as: UTF8.self).contains("_defaultZone")), "not in the zone list")
        }
    }
}
