import AsyncHTTPClient
import CloudKitModel
import FakeCloudKit
import FakeCloudKitServer
import Foundation
import Testing

@Suite struct FakeCloudKitServerTests {
    typealias Harness = FakeServerHarness

    static let note: JSONValue = .object([
        "recordName": .string("added-1"), "recordType": .string("Note"),
        "fields": .object([
            "title": .object(["value": .string("Grüße"), "type": .string("STRING")]),
            "wordCount": .object(["value": .int(Int64.max), "type": .string("INT64")]),
        ]),
    ])

    @Test func nilTokenFetchPagesASnapshotOfLiveRecordsWithoutDeletions() async throws {
        try await Harness.with { server in
            let settings = server.configuration.settings
            let expected = ExpectedState(settings: settings)
            for zoneName in ["Zone01", "Zone02"] {
                let (entries, token, pages) = try await server.fetchAll(zone: zoneName, resultsLimit: 37)
                #expect(pages > 1)
                #expect(entries.allSatisfy { $0["deleted"]?.boolValue != true && $0["recordType"] != nil })
                let names = entries.compactMap { $0["recordName"]?.stringValue }
                #expect(Set(names).count == names.count, "a snapshot holds each record once")
                let live = expected.rows.filter { $0.key.zoneName == zoneName && !$0.value.deleted }
                #expect(Set(names) == Set(live.keys.map(\.recordName)))
                for entry in entries {
                    let row = live[ExpectedState.Key(zoneName: zoneName, recordName: entry["recordName"]!.stringValue!)]
                    #expect(entry["recordChangeTag"]?.stringValue == row?.record.recordChangeTag)
                    #expect(entry["zoneID"]?["zoneName"]?.stringValue == zoneName)
                    #expect(entry["created"]?["timestamp"] != nil)
                }
                // The snapshot's last token is the history position it was taken at.
                let after = try await server.fetchAll(zone: zoneName, from: token)
                #expect(after.entries.isEmpty)
            }
        }
    }

    @Test func recordsAreServedInCloudKitsWireFormExactlyAsGenerated() async throws {
        try await Harness.with { server in
            let answer = try await server.cloudKit("records/changes", body: .object(["zoneID": .object(["zoneName": .string("Zone01")])]))
            let served = try #require(answer.json?["records"]?.arrayValue)
            let feed = FakeFeed(settings: server.configuration.settings)
            var latest: [String: Record] = [:]
            for case .record(let record) in feed.entries(zone: 0, range: 0..<feed.entriesPerZone) { latest[record.recordName] = record }
            var tags = Set<String>()
            for entry in served {
                guard case .object(var members) = entry else { continue }
                #expect(members.removeValue(forKey: "pluginFields") == .object([:]))
                #expect(members.removeValue(forKey: "deleted") == .bool(false))
                let name = try #require(members["recordName"]?.stringValue)
                let generated = try #require(latest[name])
                #expect(Self.normalized(.object(members)) == Self.normalized(generated.json))
                tags.formUnion(generated.fields.values.map(\.typeTag))
                // The client's decoder reads the wire form back as a record.
                let decoded = try JSONDecoder().decode(RecordEntry.self, from: Data(entry.jsonText.utf8))
                #expect(decoded.recordName == name)
            }
            #expect(tags.isSuperset(of: ["STRING", "INT64", "DOUBLE", "TIMESTAMP", "BYTES", "REFERENCE", "ASSETID", "LOCATION", "STRING_LIST"]))
        }
    }

    /// JSON numbers as a decoder sees them: an integral double (within 2^53) is an integer.
    static func normalized(_ value: JSONValue) -> JSONValue {
        switch value {
        case .double(let d) where d.rounded() == d && abs(d) < 9_007_199_254_740_992: return .int(Int64(d))
        case .array(let items): return .array(items.map(normalized))
        case .object(let members): return .object(members.mapValues(normalized))
        default: return value
        }
    }

    @Test func tokenFetchAfterAdminChangesReturnsExactlyThoseChanges() async throws {
        try await Harness.with { server in
            let backfill = try await server.fetchAll(zone: "Zone02")
            let existing = backfill.entries.compactMap { $0["recordName"]?.stringValue }
            try await server.admin("records/add", .object(["zone": .string("Zone02"), "records": .array([Self.note])]))
            try await server.admin("records/delete", .object(["zone": .string("Zone02"), "recordNames": .array([.string(existing[0])])]))

            let changes = try await server.fetchAll(zone: "Zone02", from: backfill.token)
            #expect(changes.entries.count == 2)
            let added = changes.entries[0]
            #expect(added["recordName"]?.stringValue == "added-1")
            #expect(added["recordType"]?.stringValue == "Note")
            #expect(added["fields"]?["title"] == .object(["value": .string("Grüße"), "type": .string("STRING")]))
            #expect(added["fields"]?["wordCount"]?["value"] == .int(Int64.max))
            #expect(added["recordChangeTag"]?.stringValue != nil)
            #expect(added["modified"]?["userRecordName"]?.stringValue == "_fakeUser")
            let deletion = changes.entries[1]
            #expect(deletion.objectKeys == ["recordName", "deleted", "zoneID"], "a tombstone has no recordType")
            #expect(deletion["recordName"]?.stringValue == existing[0])
            #expect(deletion["deleted"]?.boolValue == true)

            // desiredKeys filters the fields; resultsLimit caps the page.
            let filtered = try await server.cloudKit(
                "records/changes",
                body: .object([
                    "zoneID": .object(["zoneName": .string("Zone02")]), "syncToken": .string(backfill.token),
                    "desiredKeys": .array([.string("title")]), "resultsLimit": .int(1),
                ]))
            let page = try #require(filtered.json)
            #expect(page["records"]?.arrayValue?.count == 1)
            #expect(page["records"]?.arrayValue?.first?["fields"]?.objectKeys == ["title"])
            #expect(page["moreComing"]?.boolValue == true)

            // A nil-token fetch now leaves the deleted record out and has the added one.
            let snapshot = try await server.fetchAll(zone: "Zone02")
            let names = Set(snapshot.entries.compactMap { $0["recordName"]?.stringValue })
            #expect(names.contains("added-1"))
            #expect(!names.contains(existing[0]))
            #expect(names.count == existing.count)
        }
    }

    @Test func anAddedVersionOfAGeneratedRecordKeepsItsPlaceAndItsCreationStamp() async throws {
        try await Harness.with { server in
            let before = try await server.fetchAll(zone: "Zone01")
            let target = before.entries[5]
            let name = try #require(target["recordName"]?.stringValue)
            // No `created`: the server takes the live record's.
            try await server.admin(
                "records/add",
                .object([
                    "zone": .string("Zone01"),
                    "records": .array([
                        .object([
                            "recordName": .string(name), "recordType": .string("Note"),
                            "fields": .object(["title": .object(["value": .string("edited"), "type": .string("STRING")])]),
                        ])
                    ]),
                ]))
            let after = try await server.fetchAll(zone: "Zone01", resultsLimit: 3)
            #expect(after.entries.map { $0["recordName"] } == before.entries.map { $0["recordName"] }, "an update keeps the record's place")
            #expect(after.entries[5]["created"] == target["created"])
            #expect(after.entries[5]["fields"]?["title"]?["value"]?.stringValue == "edited")
            #expect(after.entries[4] == before.entries[4] && after.entries[6] == before.entries[6])
        }
    }

    @Test func everyResponseCarriesARotatedTokenThatIsAccepted() async throws {
        try await Harness.with { server in
            let first = try await server.cloudKit("users/caller", database: "public", method: "GET")
            #expect(first.status == 200)
            #expect(first.json?["users"]?.arrayValue?.first?["userRecordName"]?.stringValue == "_fakeUser")
            let rotated = try #require(first.rotatedToken)
            #expect(rotated != Harness.initialWebToken)

            // An error response rotates too, and the rotated token is accepted.
            let missing = try await server.cloudKit(
                "records/changes", body: .object(["zoneID": .object(["zoneName": .string("Nope")])]), webAuthToken: rotated)
            #expect(missing.status == 404)
            #expect(missing.json?["serverErrorCode"]?.stringValue == "ZONE_NOT_FOUND")
            let next = try #require(missing.rotatedToken)
            #expect(next != rotated)

            // Revoking the initial token leaves the issued ones valid.
            try await server.admin("auth/revoke", .object(["initial": .bool(true)]))
            let revoked = try await server.cloudKit("users/caller", database: "public", method: "GET")
            #expect(revoked.status == 401)
            let stillGood = try await server.cloudKit("zones/list", method: "GET", webAuthToken: next)
            #expect(stillGood.status == 200)
            #expect(stillGood.json?["zones"]?.arrayValue?.count == 2)

            // A `+` sent unencoded reads as a space, as on a real server.
            let unencoded = try await server.send(
                server.url(database: "public", operation: "users/caller", webAuthToken: next, encodeToken: false), method: "GET")
            #expect(unencoded.status == 401)

            try await server.admin("auth/revoke", .object(["all": .bool(true)]))
            let none = try await server.cloudKit("zones/list", method: "GET", webAuthToken: next)
            #expect(none.status == 401)
        }
    }

    @Test func authenticationErrorsHaveCloudKitBodies() async throws {
        try await Harness.with { server in
            let required = try await server.cloudKit("zones/list", method: "GET", webAuthToken: nil)
            #expect(required.status == 421)
            let body = try #require(required.json)
            #expect(body["serverErrorCode"]?.stringValue == "AUTHENTICATION_REQUIRED")
            #expect(body["redirectURL"]?.stringValue?.hasPrefix("http://127.0.0.1:\(server.port)/signin") == true, "the fake's own sign-in page")
            #expect(body["uuid"]?.stringValue != nil)
            #expect(body["reason"]?.stringValue != nil)
            #expect(required.rotatedToken == nil)

            let failed = try await server.cloudKit("zones/list", method: "GET", webAuthToken: "stolen")
            #expect(failed.status == 401)
            #expect(failed.json?["serverErrorCode"]?.stringValue == "AUTHENTICATION_FAILED")

            let badAPIToken = try await server.send(
                server.url(database: "private", operation: "zones/list", webAuthToken: Harness.initialWebToken, apiToken: "wrong"), method: "GET")
            #expect(badAPIToken.status == 401)
        }
    }

    @Test func expiredMalformedAndForeignTokensAreBadRequests() async throws {
        try await Harness.with { server in
            let zones = try #require(try await server.cloudKit("zones/list", method: "GET").json?["zones"]?.arrayValue)
            let token = try #require(zones.first?["syncToken"]?.stringValue)
            #expect(zones.first?["zoneID"]?["zoneName"]?.stringValue == "Zone01")
            #expect(try await server.fetchAll(zone: "Zone01", from: token).entries.isEmpty)

            func fetch(_ zone: String, _ token: String) async throws -> Harness.Answer {
                try await server.cloudKit("records/changes", body: .object(["zoneID": .object(["zoneName": .string(zone)]), "syncToken": .string(token)]))
            }
            let foreign = try await fetch("Zone02", token)
            #expect(foreign.status == 400)
            #expect(foreign.json?["serverErrorCode"]?.stringValue == "BAD_REQUEST")
            let malformed = try await fetch("Zone01", "not-a-token")
            #expect(malformed.status == 400)
            #expect(malformed.json?["reason"]?.stringValue?.contains("token") == true)

            try await server.admin("zones/expire-tokens", .object(["zone": .string("Zone01")]))
            let expired = try await fetch("Zone01", token)
            #expect(expired.status == 400)
            #expect(expired.json?["serverErrorCode"]?.stringValue == "BAD_REQUEST")
            #expect(expired.json?["reason"]?.stringValue?.contains("token") == true)
            #expect(expired.rotatedToken != nil)
            // A nil-token fetch still works, and its tokens are good.
            let fresh = try await server.fetchAll(zone: "Zone01")
            #expect(!fresh.entries.isEmpty)
            #expect(try await fetch("Zone01", fresh.token).status == 200)
        }
    }

    @Test func deletedAndPurgedZonesAreGoneAndReportedByTheDatabaseFeed() async throws {
        try await Harness.with { server in
            let initial = try #require(try await server.cloudKit("changes/database", body: .object([:])).json)
            #expect(initial["zones"]?.arrayValue?.compactMap { $0["zoneID"]?["zoneName"]?.stringValue } == ["Zone01", "Zone02"])
            #expect(initial["zones"]?.arrayValue?.first?["zoneID"]?["zoneType"]?.stringValue == "REGULAR_CUSTOM_ZONE")
            #expect(initial["moreComing"]?.boolValue == false)
            let token = try #require(initial["syncToken"]?.stringValue)

            try await server.admin("zones/delete", .object(["zone": .string("Zone01")]))
            try await server.admin("zones/purge", .object(["zone": .string("Zone02")]))
            try await server.admin("records/add", .object(["zone": .string("Inbox"), "records": .array([Self.note])]))

            let gone = try await server.cloudKit("records/changes", body: .object(["zoneID": .object(["zoneName": .string("Zone01")])]))
            #expect(gone.status == 404)
            #expect(gone.json?["serverErrorCode"]?.stringValue == "ZONE_NOT_FOUND")

            let changes = try #require(try await server.cloudKit("changes/database", body: .object(["syncToken": .string(token)])).json)
            let zones = try #require(changes["zones"]?.arrayValue)
            #expect(zones.count == 3)
            #expect(zones[0]["zoneID"]?["zoneName"]?.stringValue == "Zone01")
            #expect(zones[0]["deleted"]?.boolValue == true)
            #expect(zones[0]["purged"] == nil)
            #expect(zones[1]["zoneID"]?["zoneName"]?.stringValue == "Zone02")
            #expect(zones[1]["purged"]?.boolValue == true)
            #expect(zones[2]["zoneID"]?["zoneName"]?.stringValue == "Inbox")
            #expect(zones[2]["deleted"] == nil)

            // From its new token, the database feed reports only what comes next.
            let next = try #require(changes["syncToken"]?.stringValue)
            try await server.admin("zones/reset-encrypted-data", .object(["zone": .string("Inbox")]))
            let reset = try #require(try await server.cloudKit("changes/database", body: .object(["syncToken": .string(next)])).json)
            #expect(reset["zones"]?.arrayValue?.count == 1)
            #expect(reset["zones"]?.arrayValue?.first?["encryptedDataReset"]?.boolValue == true)

            // A zone token is not a database token.
            let zoneToken = try await server.fetchAll(zone: "Inbox").token
            let wrongKind = try await server.cloudKit("changes/database", body: .object(["syncToken": .string(zoneToken)]))
            #expect(wrongKind.status == 400)
        }
    }

    @Test func injectedFailuresThrottlingAndGarbage() async throws {
        try await Harness.with { server in
            let body: JSONValue = .object(["zoneID": .object(["zoneName": .string("Zone01")]), "resultsLimit": .int(3)])
            try await server.admin(
                "faults/fail", .object(["count": .int(2), "status": .int(503), "retryAfter": .double(0.2), "pathSuffix": .string("records/changes")]))
            // The fault is for records/changes only.
            #expect(try await server.cloudKit("zones/list", method: "GET").status == 200)
            for _ in 0..<2 {
                let failed = try await server.cloudKit("records/changes", body: body)
                #expect(failed.status == 503)
                #expect(failed.json?["serverErrorCode"]?.stringValue == "TRY_AGAIN_LATER")
                #expect(failed.json?["retryAfter"]?.doubleValue == 0.2)
                #expect(failed.rotatedToken != nil)
            }
            #expect(try await server.cloudKit("records/changes", body: body).status == 200)

            try await server.admin("faults/throttle", .object(["retryAfter": .double(2), "retryAfterHeader": .bool(true)]))
            let throttled = try await server.cloudKit("records/changes", body: body)
            #expect(throttled.status == 429)
            #expect(throttled.json?["serverErrorCode"]?.stringValue == "THROTTLED")
            #expect(throttled.json?["retryAfter"]?.doubleValue == 2)
            #expect(throttled.headers["retry-after"] == "2")

            try await server.admin("faults/garbage")
            let garbage = try await server.cloudKit("records/changes", body: body)
            #expect(garbage.status == 200)
            #expect(garbage.json == nil)
            #expect(garbage.headers["content-type"]?.hasPrefix("text/html") == true)

            try await server.admin("faults/delay", .object(["milliseconds": .int(300), "count": .int(1)]))
            let start = ContinuousClock.now
            #expect(try await server.cloudKit("records/changes", body: body).status == 200)
            #expect(ContinuousClock.now - start >= .milliseconds(300))

            let state = try await server.admin("state")
            #expect(state["faultsServed"] == .int(4), "2 failures, a throttle and garbage; a delay is not a fault")
            #expect(state["pendingFaults"] == .int(0))
            #expect(state["databases"]?["private"]?["zones"]?.arrayValue?.first?["historyLength"] == .int(300))
        }
    }

    /// A gate keeps the requests of its path until as many as it waits for have come, then lets
    /// them on together; requests of other paths, and those after, pass. `faults/clear` opens it.
    @Test func aGateKeepsRequestsUntilTheLastItWaitsForHasCome() async throws {
        try await Harness.with { server in
            /// Returns once the server keeps `count` requests at its gates, within 120 s (the
            /// server runs in this process, beside the whole suite's tests on two cores).
            func keptAtGates(_ count: Int) async throws {
                let deadline = ContinuousClock.now + .seconds(120)
                while try await server.admin("state")["keptAtGates"] != .int(Int64(count)) {
                    try #require(ContinuousClock.now < deadline, "\(count) requests kept at the gate within 120 s")
                    try await Task.sleep(for: .milliseconds(10))
                }
            }
            let body: JSONValue = .object(["zoneID": .object(["zoneName": .string("Zone01")]), "resultsLimit": .int(3)])
            try await server.admin("faults/gate", .object(["count": .int(2), "pathSuffix": .string("records/changes"), "milliseconds": .int(300_000)]))
            let first = Task {
                let answer = try await server.cloudKit("records/changes", body: body)
                return (answer.status, ContinuousClock.now)
            }
            try await keptAtGates(1)
            #expect(try await server.cloudKit("zones/list", method: "GET").status == 200, "another path passes the gate")
            let secondSent = ContinuousClock.now
            #expect(try await server.cloudKit("records/changes", body: body).status == 200)
            let (status, firstAnswered) = try await first.value
            #expect(status == 200)
            #expect(firstAnswered >= secondSent, "the first request was kept until the second came")
            #expect(try await server.cloudKit("records/changes", body: body).status == 200, "the gate keeps no more than it waited for")

            try await server.admin("faults/gate", .object(["count": .int(5), "milliseconds": .int(120_000)]))
            let kept = Task {
                _ = try await server.cloudKit("records/changes", body: body)
                return ContinuousClock.now
            }
            try await keptAtGates(1)
            let cleared = ContinuousClock.now
            try await server.admin("faults/clear")
            let keptAnswered = try await kept.value
            #expect(keptAnswered >= cleared && keptAnswered - cleared < .seconds(30), "faults/clear let the kept request on")
        }
    }

    @Test func cutShortBodyFailsInTheClient() async throws {
        try await Harness.with { server in
            try await server.admin("faults/cut")
            await #expect(throws: (any Error).self) {
                _ = try await server.cloudKit("records/changes", body: .object(["zoneID": .object(["zoneName": .string("Zone01")])]))
            }
            // The next request is served in full.
            let whole = try await server.cloudKit("records/changes", body: .object(["zoneID": .object(["zoneName": .string("Zone01")])]))
            #expect(whole.status == 200)
            #expect(whole.json != nil)
        }
    }

    @Test func usersCallerAndRequestErrors() async throws {
        try await Harness.with { server in
            try await server.admin("user", .object(["userRecordName": .string("_someoneElse")]))
            let caller = try await server.cloudKit("users/caller", database: "public", method: "GET")
            #expect(caller.json?["users"]?.arrayValue?.first?["userRecordName"]?.stringValue == "_someoneElse")

            let publicFeed = try await server.cloudKit(
                "records/changes", database: "public", body: .object(["zoneID": .object(["zoneName": .string("Zone01")])]))
            #expect(publicFeed.status == 400)
            let unknownDatabase = try await server.cloudKit("zones/list", database: "other", method: "GET")
            #expect(unknownDatabase.status == 400)
            #expect(unknownDatabase.json?["serverErrorCode"]?.stringValue == "BAD_REQUEST")
            let tooMany = try await server.cloudKit(
                "records/changes", body: .object(["zoneID": .object(["zoneName": .string("Zone01")]), "resultsLimit": .int(201)]))
            #expect(tooMany.status == 400)
            let shared = try await server.cloudKit("changes/database", database: "shared", body: .object([:]))
            #expect(shared.json?["zones"]?.arrayValue?.isEmpty == true)
        }
    }

    @Test func scenarioFileReplacesTheGenerator() async throws {
        let scenario = """
            {"userRecordName": "_alice", "zones": [{"zoneName": "Notes", "records": [
              {"recordName": "n0", "recordType": "Note", "fields": {"title": {"value": "gone", "type": "STRING"}}},
              {"recordName": "n1", "recordType": "Note", "fields": {"title": {"value": "first", "type": "STRING"}},
               "created": {"timestamp": 1700000000000, "userRecordName": "_alice"}},
              {"recordName": "n1", "recordType": "Note", "fields": {"title": {"value": "second", "type": "STRING"}}},
              {"recordName": "n0", "deleted": true}
            ]}]}
            """
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("scenario-\(UUID().uuidString).json").path
        try Data(scenario.utf8).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }

        try await Harness.with(Harness.configuration(scenarioFile: path)) { server in
            let snapshot = try await server.fetchAll(zone: "Notes")
            #expect(snapshot.entries.count == 1)
            #expect(snapshot.entries.first?["fields"]?["title"]?["value"]?.stringValue == "second")
            #expect(snapshot.entries.first?["created"]?["timestamp"] == .int(1_700_000_000_000))
            let zones = try await server.cloudKit("zones/list", method: "GET").json?["zones"]?.arrayValue
            #expect(zones?.compactMap { $0["zoneID"]?["zoneName"]?.stringValue } == ["Notes"])
            let caller = try await server.cloudKit("users/caller", database: "public", method: "GET")
            #expect(caller.json?["users"]?.arrayValue?.first?["userRecordName"]?.stringValue == "_alice")
        }
    }
}
