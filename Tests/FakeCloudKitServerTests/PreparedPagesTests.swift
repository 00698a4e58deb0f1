import CloudKitModel
import FakeCloudKit
import FakeCloudKitServer
import Foundation
import Synchronization
import Testing

/// `zonefeed fake-server --prepare-pages`, which `zonefeed bench` uses: a backfill's pages are
/// rendered before the server listens, and must be exactly what the server would have rendered.
@Suite struct PreparedPagesTests {
    typealias Harness = FakeServerHarness

    static func configuration(preparesPages: Bool) -> FakeCloudKitServer.Configuration {
        var configuration = Harness.configuration(settings: FakeSettings(seed: 11, zones: 2, recordsPerZone: 250, pageSize: 200, churn: false))
        configuration.preparesPages = preparesPages
        return configuration
    }

    @Test func preparedPagesAreByteForByteWhatTheServerRendersLive() async throws {
        let live = try await Self.backfillBodies(preparesPages: false, resultsLimits: [nil, 200, 90])
        let prepared = try await Self.backfillBodies(preparesPages: true, resultsLimits: [nil, 200, 90])
        // 250 records a zone: two pages of 200 or fewer, three of 90 (not prepared).
        #expect(live.bodies.map(\.count) == [2, 2, 2, 2, 3, 3])
        #expect(prepared.bodies == live.bodies)
        #expect(live.preparedPagesServed == 0)
        #expect(prepared.preparedPagesServed == 8, "two zones, two pages each, with no resultsLimit and with 200")
    }

    @Test func anAdminChangeDropsThePreparedPages() async throws {
        let note: JSONValue = .object([
            "recordName": .string("added-after-start"), "recordType": .string("Note"),
            "fields": .object(["title": .object(["value": .string("new"), "type": .string("STRING")])]),
        ])
        try await Harness.with(Self.configuration(preparesPages: true)) { server in
            try await server.admin("records/add", .object(["zone": .string("Zone01"), "records": .array([note])]))
            let names = try await server.fetchAll(zone: "Zone01").entries.compactMap { $0["recordName"]?.stringValue }
            #expect(names.contains("added-after-start"), "a backfill after the change sees it")
            #expect(names.count == 251)
        }
    }

    /// The raw bodies of a backfill of each zone from a nil token, once per results limit, and
    /// how many of them the server answered with prepared pages.
    static func backfillBodies(preparesPages: Bool, resultsLimits: [Int?]) async throws -> (bodies: [[[UInt8]]], preparedPagesServed: Int) {
        let bodies = Mutex<[[[UInt8]]]>([])
        let served = Mutex(0)
        try await Harness.with(configuration(preparesPages: preparesPages)) { server in
            for limit in resultsLimits {
                for zone in ["Zone01", "Zone02"] {
                    var pages: [[UInt8]] = []
                    var token: String?
                    repeat {
                        var body: [String: JSONValue] = ["zoneID": .object(["zoneName": .string(zone)])]
                        if let limit { body["resultsLimit"] = .int(Int64(limit)) }
                        if let token { body["syncToken"] = .string(token) }
                        let answer = try await server.cloudKit("records/changes", body: .object(body))
                        try #require(answer.status == 200)
                        pages.append(answer.bytes)
                        // The token and moreComing end the body: read from there, not by decoding it whole.
                        let (next, more) = answer.bytes.withUnsafeBufferPointer { body in
                            (
                                JSONReader.lastMember("syncToken", in: body) { try $0.readString() },
                                JSONReader.lastMember("moreComing", in: body) { try $0.readBool() }
                            )
                        }
                        token = more == true ? next : nil
                    } while token != nil
                    bodies.withLock { $0.append(pages) }
                }
            }
            let state = try await server.send("http://127.0.0.1:\(server.port)/admin/state", method: "GET")
            let count = try #require(state.json?["preparedPagesServed"]?.doubleValue)
            served.withLock { $0 = Int(count) }
        }
        return (bodies.withLock { $0 }, served.withLock { $0 })
    }
}
