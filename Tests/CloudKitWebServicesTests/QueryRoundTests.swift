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
    /// What a query asks, read from its body.
    struct Query {
        var type: String
        var marker: String?
        /// The probe of a type's earliest or latest record (one record).
        var isProbe: Bool
        var ascending: Bool
        /// Its lower bound on the modification time, if any.
        var from: Int64?
        /// Its upper bound (exclusive), if any.
        var to: Int64?
        /// A sweep's query: names only (no fields), not a probe.
        var isSweep: Bool

        init?(_ request: CannedServer.Request) {
            guard let body = try? JSONDecoder().decode(JSONValue.self, from: Data(request.body)),
                case .string(let type)? = body["query"]?["recordType"]
            else { return nil }
            self.type = type
            marker = if case .string(let m)? = body["continuationMarker"] { m } else { nil }
            isProbe = body["resultsLimit"] == .int(1)
            ascending = QueryRoundTests.first(body["query"]?["sortBy"])?["ascending"] != .bool(false)
            from = if case .int(let ms)? = QueryRoundTests.first(body["query"]?["filterBy"])?["fieldValue"]?["value"] { ms } else { nil }
            let upper: JSONValue? =
                if case .array(let filters)? = body["query"]?["filterBy"] {
                    filters.first { $0["comparator"] == .string("LESS_THAN") }?["fieldValue"]?["value"]
                } else { nil }
            to = if case .int(let ms)? = upper { ms } else { nil }
            isSweep = !isProbe && body["desiredKeys"] == .array([])
        }
    }

    static func record(_ name: String, _ type: String, at ms: Int64) -> String {
        #"{"recordName":"\#(name)","recordType":"\#(type)","recordChangeTag":"t-\#(name)","fields":{},"modified":{"timestamp":\#(ms)}}"#
    }

    static func answer(_ records: [String], marker: String? = nil) -> CannedServer.Reply {
        .json(200, #"{"records":[\#(records.joined(separator: ","))]\#(marker.map { #","continuationMarker":"\#($0)""# } ?? "")}"#)
    }

    /// A record in a canned query index: its place is by `ms` (then by the array's order), and
    /// an answer shows it with the time `shown`, later than its place when the index lags.
    struct Indexed {
        var name: String
        var ms: Int64
        var shown: Int64

        init(_ name: String, at ms: Int64, shown: Int64? = nil) {
            self.name = name
            self.ms = ms
            self.shown = shown ?? ms
        }
    }

    /// The answer of a server whose index is `index`, in its order: the probe's one record, or a
    /// page of `limit` from the place a marker `o<place>` names, with the next page's marker.
    static func answer(_ query: Query, from index: [Indexed], type: String, limit: Int) -> CannedServer.Reply {
        let found = index.filter { $0.ms >= (query.from ?? .min) && $0.ms < (query.to ?? .max) }.sorted { $0.ms < $1.ms }
        let shown = { (item: Indexed) in Self.record(item.name, type, at: item.shown) }
        if query.isProbe { return answer((query.ascending ? found.first : found.last).map { [shown($0)] } ?? []) }
        let place = query.marker.flatMap { Int($0.dropFirst()) } ?? 0
        let end = min(found.count, place + limit)
        return answer(found[min(place, end)..<end].map(shown), marker: end < found.count ? "o\(end)" : nil)
    }

    static func first(_ list: JSONValue?) -> JSONValue? {
        if case .array(let items)? = list { items.first } else { nil }
    }

    static func names(_ page: ZoneChangePage) -> [String] {
        page.entries.compactMap { if case .record(let record) = $0 { record.recordName } else { nil } }
    }

    /// A source reading the public database's `recordTypes` from a canned server that answers
    /// each query by `route`, one attempt a request; shut down however `body` ends.
    func withQuerySource<T: Sendable>(
        recordTypes: [String], resultsLimit: Int = 200, maxConcurrentRequests: Int = 2,
        configure: (inout CloudKitSettings) -> Void = { _ in },
        route: @escaping @Sendable (Query) -> CannedServer.Reply?,
        _ body: (CannedServer, CloudKitSource) async throws -> T
    ) async throws -> T {
        try await withCannedSource(recordTypes: recordTypes) { settings in
            settings.database = .public
            settings.resultsLimit = resultsLimit
            settings.maxConcurrentRequests = maxConcurrentRequests
            settings.maxAttempts = 1
            configure(&settings)
        } _: { server, source in
            server.route { request in Query(request).flatMap(route) }
            return try await body(server, source)
        }
    }

    let zone = ZoneID(zoneName: ZoneID.defaultZoneName)

    /// What a run of the zone gave: its records' names, the names its sweep listed, its last
    /// token, and whether a page said nothing more comes.
    struct Run {
        var given: [String] = []
        var listed: [String] = []
        var token: ChangeToken?
        var ended = false
    }

    /// Reads the zone page by page from `token` until a page says nothing more comes, or
    /// `pages` have been read.
    func run(_ source: CloudKitSource, from token: ChangeToken? = nil, pages: Int) async throws -> Run {
        var run = Run(token: token)
        for _ in 0..<pages where !run.ended {
            let page = try await source.fetchZoneChanges(in: zone, since: run.token)
            run.given += Self.names(page)
            run.listed += page.listed.flatMap(\.names)
            run.token = page.syncToken
            run.ended = !page.moreComing
        }
        return run
    }

    /// Type A has five records at one millisecond, more than its pages of two hold, so its
    /// slice follows the server's marker within that time; type B's query, in the same round
    /// as A's second marker page, fails. The page is asked again from the same token, as
    /// `zonefeed watch` does with the reader's memory kept: A's records of the failed round
    /// come again and must be given. Before, the failed round had already noted them as given
    /// at that time, and they were dropped for good.
    @Test func aRoundThatFailsLeavesNoRecordItReadNotedAsGiven() async throws {
        let failuresLeft = Mutex(1)
        let bQueries = Mutex(0)
        let given = try await withQuerySource(recordTypes: ["A", "B"], resultsLimit: 2) { query in
            if query.isProbe {
                return query.type == "A" ? Self.answer([Self.record("a1", "A", at: 1_000)]) : Self.answer([Self.record("b1", "B", at: 5_000)])
            }
            if query.type == "A" {
                switch query.marker {
                case nil: return Self.answer([Self.record("a1", "A", at: 1_000), Self.record("a2", "A", at: 1_000)], marker: "mA2")
                case "mA2": return Self.answer([Self.record("a3", "A", at: 1_000), Self.record("a4", "A", at: 1_000)], marker: "mA3")
                default: return Self.answer([Self.record("a5", "A", at: 1_000)])
                }
            }
            // B goes on for as long as the test reads; its third query, in page 3, fails once,
            // after A's query of that round has been answered: its answer trickles, and is not
            // JSON (not tried again here: one attempt).
            let count = bQueries.withLock {
                $0 += 1
                return $0
            }
            let fails =
                count == 3
                && failuresLeft.withLock { left in
                    defer { left = 0 }
                    return left > 0
                }
            if fails {
                return .trickle(body: Array("<html>failed once</html>".utf8), interval: .milliseconds(25))
            }
            return Self.answer([Self.record("b1", "B", at: 5_000)], marker: "mB\(count)")
        } _: { _, source in
            // Page 1 reads a1 and a2 and goes on from their time; page 2 reads them again
            // there, drops them, and goes on by the marker.
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
            return given
        }
        #expect(Set(given) == ["a1", "a2", "a3", "a4", "a5"], "every record of A is given: \(given)")
    }

    /// A first backfill meets records stamped in the year 2286 (a broken or hostile server, a
    /// client's clock). No query starts past this machine's clock: not the slice that reaches
    /// the present, nor its page after one of such records, nor its read once more after the
    /// others, which before started near 2286 and passed over every change made while the
    /// backfill ran.
    @Test func noSliceOfABackfillStartsPastThisMachinesClock() async throws {
        let future = Self.record("future", "A", at: 10_000_000_000_000)
        let future2 = Self.record("future2", "A", at: 10_000_000_000_001)
        let starts = try await withQuerySource(recordTypes: ["A"], maxConcurrentRequests: 4) { query in
            if query.isProbe { return Self.answer([query.ascending ? Self.record("a1", "A", at: 1_000) : future]) }
            // More than a page ahead: the page after goes on by the marker, not from the time.
            if query.marker == nil { return Self.answer([Self.record("a1", "A", at: 1_000), future, future2], marker: "mF") }
            return Self.answer([])
        } _: { server, source in
            _ = try await run(source, pages: 10)
            return server.requests.compactMap { Query($0)?.from }
        }
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        #expect(starts.count >= 4, "the slices were read: \(starts)")
        #expect(starts.allSatisfy { $0 <= now }, "every query starts before now: \(starts)")
    }

    /// A long run of ties whose every marker is refused once, then taken: each refusal is read
    /// again from the ties' time and leads on. More than 3 refusals at one time in all must not
    /// fail the zone: only refusals since a marker was last taken count.
    @Test func markersRefusedNowAndThenButTakenInBetweenReadEveryRecord() async throws {
        let asked = Mutex<[String: Int]>([:])
        let given = try await withQuerySource(recordTypes: ["A"], resultsLimit: 2) { query in
            if query.isProbe { return Self.answer([Self.record("a1", "A", at: 1_000)]) }
            guard let marker = query.marker else {
                return Self.answer([Self.record("a1", "A", at: 1_000), Self.record("a2", "A", at: 1_000)], marker: "m1")
            }
            let times = asked.withLock {
                $0[marker, default: 0] += 1
                return $0[marker]!
            }
            if times == 1 { return .error(400, code: "BAD_REQUEST", reason: "marker expired") }
            let page = Int(marker.dropFirst())!
            if page == 5 { return Self.answer([Self.record("a11", "A", at: 1_000)]) }
            let records = [Self.record("a\(2 * page + 1)", "A", at: 1_000), Self.record("a\(2 * page + 2)", "A", at: 1_000)]
            return Self.answer(records, marker: "m\(page + 1)")
        } _: { _, source in
            try await run(source, pages: 40).given
        }
        #expect(Set(given) == Set((1...11).map { "a\($0)" }), "\(given)")
    }

    /// Six records at one millisecond, pages of two, so that a pass or a sweep follows the
    /// server's markers through them. A marker is a place in the answer as it is when the next
    /// page is asked (as the fake server's, and as CloudKit's may be): a1, read in the first
    /// page, is modified before the second marker page, moves to the end of the order, and the
    /// records after it move up a place, so that the chain passes over a3. Before, a pass never
    /// gave a3 and a sweep did not list it (its row was taken for deleted); the ties are now
    /// read once more when the chain ends.
    @Test(arguments: ["pass", "sweep"])
    func aRecordChangedWhileItsTiesAreReadByMarkerPassesOverNoOther(_ reading: String) async throws {
        let index = Mutex((1...6).map { Indexed("a\($0)", at: 1_000) })
        let (given, listed) = try await withQuerySource(recordTypes: ["A"], resultsLimit: 2, maxConcurrentRequests: 1) { settings in
            settings.deletionSweep = .everyRuns(1)
        } route: { query in
            index.withLock { index in
                if query.marker == "o2", query.isSweep == (reading == "sweep"), index[0].name == "a1" {
                    // a1 is modified: a later time, the end of the order.
                    index.append(Indexed("a1", at: 2_000))
                    index.removeFirst()
                }
                return Self.answer(query, from: index, type: "A", limit: 2)
            }
        } _: { _, source in
            // The first run backfills; the second reads from the watermark again, then sweeps.
            // The read once more is not itself read again: each run ends.
            let first = try await run(source, pages: 30)
            let second = try await run(source, from: first.token, pages: 30)
            #expect(first.ended && second.ended, "both runs end")
            return (first.given, first.listed + second.listed)
        }
        #expect(index.withLock { $0.last?.name } == "a1", "a1 was modified while its ties were read by marker")
        let all = Set((1...6).map { "a\($0)" })
        if reading == "pass" {
            #expect(Set(given) == all, "the backfill gives every record: \(given)")
        } else {
            #expect(Set(listed) == all, "the sweep lists every record: \(listed)")
        }
    }

    /// Twenty records at one millisecond, pages of two: the chain of markers through them, then
    /// the read once more, every page of which gives names already given. A marker of that read
    /// refused part way has it start again from the ties' time: the pages it read before the
    /// refusal must not count against it, or a healthy zone fails as one whose markers lead
    /// nowhere.
    @Test func aMarkerRefusedWhileTheTiesAreReadOnceMoreFailsNothing() async throws {
        let index = (1...20).map { Indexed("a\($0)", at: 1_000) }
        let asked = Mutex<[String: Int]>([:])
        let given = try await withQuerySource(recordTypes: ["A"], resultsLimit: 2, maxConcurrentRequests: 1) { query in
            let times = query.marker.map { marker in
                asked.withLock {
                    $0[marker, default: 0] += 1
                    return $0[marker]!
                }
            }
            if query.marker == "o16", times == 2 { return .error(400, code: "BAD_REQUEST", reason: "marker expired") }
            return Self.answer(query, from: index, type: "A", limit: 2)
        } _: { _, source in
            let read = try await run(source, pages: 60)
            #expect(read.ended, "the run ends")
            return read.given
        }
        #expect(asked.withLock { $0["o16"] } == 3, "o16 was refused once, in the read once more")
        #expect(Set(given) == Set((1...20).map { "a\($0)" }))
    }

    /// One request at a time, more ties than a page holds and more records after them than a
    /// page holds: the chain of markers through the ties ends on a page that goes on by time,
    /// and the ties' read once more is a slice after the open one. The open slice waited for it
    /// at the present, and was the only slice read, round after round: the read never ended.
    @Test func withOneRequestAtATimeTheTiesReadOnceMoreAreReadBeforeThePresentAgain() async throws {
        let index = (1...6).map { Indexed("a\($0)", at: 1_000) } + (1...6).map { Indexed("b\($0)", at: 2_000 + Int64($0)) }
        let read = try await withQuerySource(recordTypes: ["A"], resultsLimit: 2, maxConcurrentRequests: 1) { query in
            Self.answer(query, from: index, type: "A", limit: 2)
        } _: { _, source in
            try await run(source, pages: 60)
        }
        #expect(read.ended, "the read ends")
        #expect(Set(read.given) == Set(index.map(\.name)))
    }

    /// The probe of a type's earliest and latest records answered without a time (an error
    /// entry for a record, or no record with more to come) was taken for a type without records:
    /// left unread without a word, and in a resync, every row of it tombstoned at its end. The
    /// run fails instead, and the next reads the type.
    @Test(arguments: ["an error entry", "no record with more to come"])
    func aProbeAnsweredWithoutATimeFailsRatherThanCallingTheTypeEmpty(_ answer: String) async throws {
        let index = (1...5).map { Indexed("a\($0)", at: 1_000 + Int64($0)) }
        let probes = Mutex(0)
        let next = try await withQuerySource(recordTypes: ["A"], resultsLimit: 2) { query in
            let probe =
                query.isProbe
                ? probes.withLock { count in
                    count += 1
                    return count
                } : 0
            if query.isProbe, probe <= 2 {
                return answer == "an error entry"
                    ? Self.answer([#"{"recordName":"a1","serverErrorCode":"TRY_AGAIN_LATER","reason":"busy"}"#])
                    : Self.answer([], marker: "p1")
            }
            return Self.answer(query, from: index, type: "A", limit: 2)
        } _: { _, source in
            await #expect(throws: SyncError.self) { _ = try await run(source, pages: 30) }
            return try await run(source, pages: 30)
        }
        #expect(next.ended)
        #expect(Set(next.given) == Set(index.map(\.name)), "the next run reads the type")
    }

    /// A last sweep stamped in the future (a clock that was ahead for one run) put off every
    /// sweep of `deletionSweep: every N seconds` until that date: it is taken as long past.
    @Test func aLastSweepStampedAheadOfTheClockLeavesTheNextSweepDue() async throws {
        let index = (1...3).map { Indexed("a\($0)", at: 1_000 + Int64($0)) }
        let listed = try await withQuerySource(recordTypes: ["A"]) { settings in
            settings.deletionSweep = .interval(seconds: 3_600)
        } route: { query in
            Self.answer(query, from: index, type: "A", limit: 200)
        } _: { _, source in
            let first = try await run(source, pages: 30)
            #expect(first.listed.isEmpty, "the backfill counts as a sweep")
            let token = try #require(first.token?.value)
            let ahead = token.replacing(/"lastSweepAt":[0-9.e+]+/, with: #""lastSweepAt":4102444800"#)
            #expect(ahead != token && ahead.contains("4102444800"), "the last sweep is now in the year 2100")
            return try await run(source, from: ChangeToken(ahead), pages: 30).listed
        }
        #expect(Set(listed) == Set(index.map(\.name)), "the next run sweeps")
    }

    /// Twenty records at times of their own, pages of seven. The index lags for r3 and r5: the
    /// answer gives their current versions, modified later than every record of the first page,
    /// at their old places. Going on from the page's second latest time passed over r8 to r20;
    /// the earlier of its last two records' times passes over none.
    @Test func recordsAheadOfTheirPlacesInAPageButTheLastPassOverNoOther() async throws {
        var index = (1...20).map { Indexed("r\($0)", at: 1_000 + Int64($0)) }
        index[2].shown = 1_090
        index[4].shown = 1_080
        let given = try await withQuerySource(recordTypes: ["A"], resultsLimit: 7, maxConcurrentRequests: 1) { [index] query in
            Self.answer(query, from: index, type: "A", limit: 7)
        } _: { _, source in
            try await run(source, pages: 20).given
        }
        #expect(Set(given) == Set((1...20).map { "r\($0)" }), "every record is given: \(given)")
    }

    /// A run of ties read by marker, from a server whose markers never lead on: one that gives
    /// back the marker it was asked with, refuses every marker (each read again from the ties'
    /// time gives the same first marker), goes round two markers, or gives a fresh marker to
    /// the same record every page. Type B's slice changes the zone's token every
    /// page, so the engine sees progress; the reader itself must stop, and fail the zone,
    /// within a few pages. Before, it read the same page for ever.
    @Test(arguments: ["gives back its marker", "refuses every marker", "alternates two markers", "gives fresh markers to the same record"])
    func aMarkerThatNeverLeadsOnFailsTheZoneWithinAFewPages(_ misbehaviour: String) async throws {
        let bPages = Mutex(0)
        let failure = try await withQuerySource(recordTypes: ["A", "B"], resultsLimit: 2) { query in
            if query.isProbe {
                return query.type == "A" ? Self.answer([Self.record("a1", "A", at: 1_000)]) : Self.answer([Self.record("b0", "B", at: 5_000)])
            }
            if query.type == "B" {
                // A record at a later time every page: the zone's token moves on.
                let page = bPages.withLock {
                    $0 += 1
                    return $0
                }
                return Self.answer([Self.record("b\(page)", "B", at: 5_000 + Int64(page))], marker: "mB\(page)")
            }
            switch query.marker {
            case nil: return Self.answer([Self.record("a1", "A", at: 1_000), Self.record("a2", "A", at: 1_000)], marker: "m1")
            case _ where misbehaviour == "refuses every marker": return .error(400, code: "BAD_REQUEST", reason: "marker expired")
            case "m1" where misbehaviour == "alternates two markers":
                return Self.answer([Self.record("a3", "A", at: 1_000), Self.record("a4", "A", at: 1_000)], marker: "m2")
            case "m2" where misbehaviour == "alternates two markers":
                return Self.answer([Self.record("a5", "A", at: 1_000), Self.record("a6", "A", at: 1_000)], marker: "m1")
            case let marker? where misbehaviour == "gives fresh markers to the same record":
                return Self.answer([Self.record("a3", "A", at: 1_000)], marker: marker + "+")
            default: return Self.answer([Self.record("a3", "A", at: 1_000)], marker: query.marker)
            }
        } _: { _, source -> SyncError? in
            var token: ChangeToken?
            for _ in 0..<16 {
                do {
                    let page = try await source.fetchZoneChanges(in: zone, since: token)
                    #expect(page.syncToken != token, "the zone's token moves on")
                    token = page.syncToken
                } catch let error as SyncError {
                    return error
                }
            }
            return nil
        }
        let said =
            switch misbehaviour {
            case "gives back its marker": "CloudKit gave back the continuation marker a query of A was asked with"
            case "refuses every marker": "CloudKit refused the continuation marker of a query of A more than 3 times"
            default: "CloudKit's continuation markers for a query of A led to"
            }
        #expect(failure?.code == .failed && failure?.message.contains(said) == true, "\(String(describing: failure))")
    }
}
