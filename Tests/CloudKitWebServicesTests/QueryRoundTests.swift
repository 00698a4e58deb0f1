import CloudKitModel
import CloudKitWebServices
import Foundation
import Logging
import Synchronization
import Testing
import ZoneFeed
import ZoneFeedCloudKit

/// The public database's reader, a page (a round of queries) at a time, against answers chosen
/// by what each query asks: the queries of a round are in flight at once.
@Suite struct QueryRoundTests {
    static func record(_ name: String, _ type: String, at ms: Int64) -> String {
        #"{"recordName":"\#(name)","recordType":"\#(type)","recordChangeTag":"t-\#(name)","fields":{},"modified":{"timestamp":\#(ms)}}"#
    }

    static func answer(_ records: [String], marker: String? = nil) -> CannedServer.Reply {
        .json(200, #"{"records":[\#(records.joined(separator: ","))]\#(marker.map { #","continuationMarker":"\#($0)""# } ?? "")}"#)
    }

    static func first(_ list: JSONValue?) -> JSONValue? {
        if case .array(let items)? = list { items.first } else { nil }
    }

    static func names(_ page: ZoneChangePage) -> [String] {
        page.entries.compactMap { if case .record(let record) = $0 { record.recordName } else { nil } }
    }

    /// Type A has five records at one millisecond, more than its pages of two hold, so its
    /// slice follows the server's marker within that time; type B's query, in the same round
    /// as A's second marker page, fails. The page is asked again from the same token, as
    /// `zonefeed watch` does with the reader's memory kept: A's records of the failed round
    /// come again and must be given. Before, the failed round had already noted them as given
    /// at that time, and they were dropped for good.
    @Test func aRoundThatFailsLeavesNoRecordItReadNotedAsGiven() async throws {
        let server = try await CannedServer.start()
        let failuresLeft = Mutex(1)
        let bQueries = Mutex(0)
        server.route { request in
            guard let body = try? JSONDecoder().decode(JSONValue.self, from: Data(request.body)),
                case .string(let type)? = body["query"]?["recordType"]
            else { return nil }
            let marker: String? = if case .string(let m)? = body["continuationMarker"] { m } else { nil }
            if body["resultsLimit"] == .int(1) {
                // The probe of a type's earliest and latest record.
                return type == "A" ? Self.answer([Self.record("a1", "A", at: 1_000)]) : Self.answer([Self.record("b1", "B", at: 5_000)])
            }
            if type == "A" {
                switch marker {
                case nil: return Self.answer([Self.record("a1", "A", at: 1_000), Self.record("a2", "A", at: 1_000)], marker: "mA2")
                case "mA2": return Self.answer([Self.record("a3", "A", at: 1_000), Self.record("a4", "A", at: 1_000)], marker: "mA3")
                default: return Self.answer([Self.record("a5", "A", at: 1_000)])
                }
            }
            // B goes on for as long as the test reads; its third query, in page 3, fails once
            // (a server fault, not retried here: one attempt).
            let count = bQueries.withLock {
                $0 += 1
                return $0
            }
            if count == 3,
                failuresLeft.withLock({ left in
                    defer { left = 0 }
                    return left > 0
                })
            {
                return .error(500, code: "INTERNAL_ERROR", reason: "failed once")
            }
            return Self.answer([Self.record("b1", "B", at: 5_000)], marker: "mB")
        }
        var settings = CloudKitSettings(
            container: "iCloud.com.example.notes",
            auth: .init(apiToken: Secret(Secrets.apiToken), webAuthToken: Secret(Secrets.webAuthToken)))
        settings.baseURL = server.baseURL
        settings.database = .public
        settings.resultsLimit = 2
        settings.maxConcurrentRequests = 2
        settings.maxAttempts = 1
        settings.timeoutSeconds = 10
        var source = try CloudKitSource(settings: settings, logger: LogRecorder().logger)
        source.recordTypes = ["A", "B"]
        let zone = ZoneID(zoneName: ZoneID.defaultZoneName)

        // Page 1 reads a1 and a2 and goes on from their time; page 2 reads them again there,
        // drops them, and goes on by the marker.
        var given: [String] = []
        let first = try await source.fetchZoneChanges(in: zone, since: nil)
        given += Self.names(first).filter { $0.hasPrefix("a") }
        let second = try await source.fetchZoneChanges(in: zone, since: first.syncToken)
        given += Self.names(second).filter { $0.hasPrefix("a") }
        // Page 3: A's marker page (a3, a4) comes, B's query fails, and so does the page.
        await #expect(throws: SyncError.self) { try await source.fetchZoneChanges(in: zone, since: second.syncToken) }
        var token = second.syncToken
        for _ in 0..<3 {
            let page = try await source.fetchZoneChanges(in: zone, since: token)
            given += Self.names(page).filter { $0.hasPrefix("a") }
            token = page.syncToken
        }
        try await source.shutdown()
        try await server.stop()

        #expect(Set(given) == ["a1", "a2", "a3", "a4", "a5"], "every record of A is given: \(given)")
    }

    /// A first backfill meets a record stamped in the year 2286 (a broken or hostile server, a
    /// client's clock). No query starts past this machine's clock: not the slice that reaches
    /// the present, nor its read once more after the others, which before started near 2286 and
    /// passed over every change made while the backfill ran.
    @Test func noSliceOfABackfillStartsPastThisMachinesClock() async throws {
        let server = try await CannedServer.start()
        let ahead: Int64 = 10_000_000_000_000
        server.route { request in
            guard let body = try? JSONDecoder().decode(JSONValue.self, from: Data(request.body)) else { return nil }
            let future = Self.record("future", "A", at: ahead)
            if body["resultsLimit"] == .int(1) {
                let ascending = Self.first(body["query"]?["sortBy"])?["ascending"] == .bool(true)
                return Self.answer([ascending ? Self.record("a1", "A", at: 1_000) : future])
            }
            return Self.answer([Self.record("a1", "A", at: 1_000), future])
        }
        var settings = CloudKitSettings(
            container: "iCloud.com.example.notes",
            auth: .init(apiToken: Secret(Secrets.apiToken), webAuthToken: Secret(Secrets.webAuthToken)))
        settings.baseURL = server.baseURL
        settings.database = .public
        settings.maxConcurrentRequests = 4
        settings.maxAttempts = 1
        var source = try CloudKitSource(settings: settings, logger: LogRecorder().logger)
        source.recordTypes = ["A"]
        var token: ChangeToken?
        for _ in 0..<10 {
            let page = try await source.fetchZoneChanges(in: ZoneID(zoneName: ZoneID.defaultZoneName), since: token)
            token = page.syncToken
            if !page.moreComing { break }
        }
        try await source.shutdown()
        try await server.stop()
        let now = Int64(Date().timeIntervalSince1970 * 1000)

        var starts: [Int64] = []
        for request in server.requests {
            let body = try JSONDecoder().decode(JSONValue.self, from: Data(request.body))
            if case .int(let from)? = Self.first(body["query"]?["filterBy"])?["fieldValue"]?["value"] { starts.append(from) }
        }
        #expect(starts.count >= 4, "the slices were read: \(starts)")
        #expect(starts.allSatisfy { $0 <= now }, "every query starts before now: \(starts)")
    }
}
