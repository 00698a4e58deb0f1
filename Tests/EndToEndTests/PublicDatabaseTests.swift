import CloudKitModel
import Crypto
import FakeCloudKit
import Foundation
import LibPQ
import TestSupport
import Testing
import ZoneFeed

/// The public database, read by query with a server-to-server key: the built binary against
/// `zonefeed fake-server` (latency, an index lag, signatures checked), into a real PostgreSQL.
@Suite struct PublicDatabaseTests {
    struct Setup {
        var p: FakePipeline
        let zonefeed: ZonefeedBinary
        let server: FakeServerProcess
        var file: String
        /// The generator's records in the public database.
        let records: Int
        let seed: UInt64

        /// A fake server whose public database holds `records` generated records, which knows
        /// the pipeline's key as `K1` (or `serverKnows`, a key of its own), and a pipeline that
        /// reads it with its key.
        init(
            _ prefix: String, seed: UInt64, records: Int, resultsLimit: Int = 50, options: [String] = [],
            serverKnows serverKey: P256.Signing.PrivateKey? = nil, configure: (inout FakePipeline) -> Void = { _ in }
        ) async throws {
            self.records = records
            self.seed = seed
            p = try await FakePipeline(prefix: prefix, fake: FakeSettings(seed: seed, zones: 1, recordsPerZone: 10, pageSize: resultsLimit))
            zonefeed = try ZonefeedBinary(environment: p.environment)
            let key = P256.Signing.PrivateKey()
            let privateFile = zonefeed.directory.appendingPathComponent("server-key.pem").path
            let publicFile = zonefeed.directory.appendingPathComponent("server-key.pub.pem").path
            #expect(FileManager.default.createFile(atPath: privateFile, contents: Data(key.pemRepresentation.utf8), attributes: [.posixPermissions: 0o600]))
            let known = (serverKey ?? key).publicKey.pemRepresentation
            #expect(FileManager.default.createFile(atPath: publicFile, contents: Data(known.utf8)))
            server = try await FakeServerProcess(
                zonefeed, seed: seed, zones: 1, recordsPerZone: 10,
                options: FakeServerProcess.strict + ["--public-records", "\(records)", "--index-lag", "0,300", "--server-key", "K1=\(publicFile)"]
                    + options)
            p.serverURL = server.url
            p.serverKey = ("K1", privateFile)
            p.maxConcurrentRequests = 8
            configure(&p)
            file = try p.write(to: zonefeed.directory)
        }

        func run(_ extra: [String] = []) async throws -> ZonefeedBinary.Output {
            var z = zonefeed
            z.environment.merge(p.environment) { _, new in new }
            return try await z.run(["run", file, "--progress", "never"] + extra)
        }

        func stop() {
            server.stop()
            zonefeed.remove()
        }

        /// The generator's live records, by name, with their change tags: what a query sees.
        func generated() -> [String: Record] {
            let state = ExpectedState(settings: FakeSettings(seed: seed, zones: 1, recordsPerZone: records))
            var live: [String: Record] = [:]
            for (key, row) in state.rows where !row.deleted { live[key.recordName] = row.record }
            return live
        }

        /// How the live rows differ from `expected` (name to change tag): empty when equal.
        func differences(from expected: [String: String]) async throws -> [String] {
            let snapshot = try await DestinationSnapshot.read(p)
            var out: [String] = []
            var live: [String: String?] = [:]
            for (key, row) in snapshot.rows where !row.deleted {
                if key.zoneName != ZoneID.defaultZoneName { out.append("\(key.recordName): in zone \(key.zoneName)") }
                live[key.recordName] = row.changeTag
            }
            for (name, tag) in expected.sorted(by: { $0.key < $1.key }) where live[name] != .some(tag) {
                out.append("\(name): expected \(tag), found \(live[name].map { $0 ?? "-" } ?? "no live row")")
            }
            for name in live.keys.sorted() where expected[name] == nil { out.append("\(name): not at the source, but live") }
            return Array(out.prefix(10))
        }

        func waitForTheIndex() async throws { try await PublicDatabaseTests.waitForTheIndex(of: server, database: "public") }

        func admin(_ operation: String, _ body: [String: Any]) async throws {
            var body = body
            body["database"] = "public"
            body["zone"] = ZoneID.defaultZoneName
            _ = try await server.admin(operation, body)
        }
    }

    /// Until the fake's query index shows every change made to `database`'s default zone (its
    /// `--index-lag` has passed for each), within a minute; throws when it does not.
    static func waitForTheIndex(of server: FakeServerProcess, database: String) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            let state = try JSONSerialization.jsonObject(with: Data(try await server.admin("state").utf8)) as? [String: Any]
            let databases = state?["databases"] as? [String: Any]
            let defaultZone = (databases?[database] as? [String: Any])?["defaultZone"] as? [String: Any]
            if defaultZone?["indexPending"] as? Int == 0 { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw FakeServerError(message: "the fake server's query index still lags after a minute")
    }

    /// Now, in CloudKit's milliseconds.
    static func nowMs() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    /// The public database has no user: `zonefeed login` on its pipeline is a usage error that
    /// says why, before it asks CloudKit for a sign-in it could never use.
    @Test func loginOnAPublicPipelineSaysThereIsNoUserToSignIn() async throws {
        let s = try await Setup("publiclogin", seed: 88, records: 10)
        defer { s.stop() }
        var z = s.zonefeed
        z.environment.merge(s.p.environment) { _, new in new }
        let login = try await z.run(["login", s.file, "--no-browser", "--timeout", "5"])
        #expect(login.status == 2, "\(login.stdout)\n\(login.stderr)")
        #expect(login.stderr.contains("reads the public database, which has no user to sign in"), "\(login.stderr)")
    }

    @Test func aSlicedBackfillThenChangesWhileRunsGoOnEndEqualToTheSourceWithNothingAppliedTwice() async throws {
        let s = try await Setup("pubquery", seed: 301, records: 3_000) {
            $0.moreCloudKit = ["deletionSweep: every 1 runs"]
        }
        defer { s.stop() }
        var expected = s.generated().mapValues { $0.recordChangeTag ?? "-" }

        // The first run backfills the type's range in slices read at once.
        let first = try await s.run()
        #expect(first.status == 0, "\(first.stderr)")
        #expect(try await s.differences(from: expected) == [])
        let traffic = try await s.server.traffic()
        #expect(traffic["peakInFlight", default: 0] > 2, "slices were read at once: \(traffic)")

        // Changes while runs go on: each record changes once (so that each change is one
        // upsert or one tombstone), 250 of the new records share one modification time (more
        // than a page of 50), and the index shows each change 0-300 ms late.
        let names = expected.keys.sorted()
        var changes = 0
        var deletions = 0
        var background: ZonefeedBinary.Running?
        for round in 0..<4 {
            let stamp = Self.nowMs()
            var added: [Record] = []
            for i in 0..<(round == 1 ? 250 : 40) {
                added.append(
                    Record(
                        recordName: "NEW-\(round)-\(i)", recordType: "Tag", recordChangeTag: "n\(round)-\(i)", fields: ["name": .string("r\(round)")],
                        created: RecordStamp(timestamp: stamp), modified: RecordStamp(timestamp: round == 1 ? stamp : stamp + Int64(i))))
            }
            for name in names[(round * 30)..<(round * 30 + 20)] {
                var record = s.generated()[name]!
                record.recordChangeTag = "u\(round)-\(name.prefix(6))"
                record.modified = RecordStamp(timestamp: stamp + 500)
                added.append(record)
            }
            try await s.admin("records/add", ["records": try FakeServerProcess.wire(added)])
            for record in added { expected[record.recordName] = record.recordChangeTag }
            changes += added.count
            let gone = Array(names[(round * 30 + 20)..<(round * 30 + 30)])
            try await s.admin("records/delete", ["recordNames": gone])
            for name in gone { expected[name] = nil }
            deletions += gone.count
            // Every other round, a run is already going when the changes come: its first query
            // is kept at a gate until they have come, and let through then.
            if let running = background {
                var kept = false
                let deadline = ContinuousClock.now + .seconds(120)
                while !kept, running.isRunning, ContinuousClock.now < deadline {
                    kept = try await !s.server.admin("state").contains("\"keptAtGates\":0")
                    if !kept { try await Task.sleep(for: .milliseconds(50)) }
                }
                #expect(kept && running.isRunning, "the run in the background was going when round \(round)'s changes came")
                try await s.server.admin("faults/clear")
                #expect(await running.wait().status == 0)
            }
            background = nil
            if round % 2 == 0 {
                var z = s.zonefeed
                z.environment.merge(s.p.environment) { _, new in new }
                // A gate for more queries than the run sends (its slices are read at once): each
                // is kept until `faults/clear` (or ten minutes).
                try await s.server.admin("faults/gate", ["count": 1_000, "pathSuffix": "records/query", "milliseconds": 600_000])
                background = try await z.start(["run", s.file, "--progress", "never"])
            } else {
                #expect(try await s.run().status == 0)
            }
        }
        if let running = background { #expect(await running.wait().status == 0) }
        // Runs until quiet, once the index shows every change.
        try await s.waitForTheIndex()
        var quiet = false
        for _ in 0..<4 where !quiet {
            let output = try await s.run()
            #expect(output.status == 0, "\(output.stderr)")
            quiet = try await s.differences(from: expected).isEmpty
        }
        #expect(try await s.differences(from: expected) == [])
        let snapshot = try await DestinationSnapshot.read(s.p)
        #expect(snapshot.runUpserts == s.generated().count + changes, "each version applied once")
        #expect(snapshot.runTombstones == deletions, "each deletion tombstoned once, by a sweep")
        #expect(snapshot.tombstonesByReason == ["resync": deletions])
        print(
            "public database: \(s.generated().count) generated records backfilled, \(changes) changes and \(deletions) deletions "
                + "while runs went on; runs: \(snapshot.runStatuses.count), upserts \(snapshot.runUpserts), tombstones \(snapshot.runTombstones); "
                + "traffic of the backfill: \(traffic)")
    }

    /// SIGKILL at random moments of a sliced backfill, then of a deletion sweep: each time the
    /// next run ends with the tables equal to the source, every record applied once and every
    /// deletion tombstoned once.
    @Test(.onItsOwnThread) func killedDuringASlicedBackfillAndDuringASweepThenRunsEndEqualToTheSource() async throws {
        let s = try await Setup("pubkill", seed: 303, records: 12_000) {
            $0.commitEvery = 400
            $0.moreCloudKit = ["deletionSweep: every 1 runs"]
        }
        defer { s.stop() }
        var zonefeed = s.zonefeed
        zonefeed.environment.merge(s.p.environment) { _, new in new }
        var expected = s.generated().mapValues { $0.recordChangeTag ?? "-" }

        var backfillKills = 0
        var applied = 0
        for _ in 0..<8 where backfillKills < 4 {
            let running = try await zonefeed.start(["run", s.file, "--progress", "never"])
            s.p.kill(running, afterProgressBeyond: applied, delay: .microseconds(Int.random(in: 0...150_000)))
            let status = await running.wait().status
            if status == SIGKILL { backfillKills += 1 }
            try await s.p.waitForSessionsToEnd()
            applied = try await s.p.recordsApplied()
            if status == 0 { break }
        }
        let backfilled = try await s.run()
        #expect(backfilled.status == 0, "\(backfilled.stderr)")
        #expect(backfillKills >= 2, "runs were killed part way through the backfill")
        #expect(try await s.differences(from: expected) == [])
        let afterBackfill = try await DestinationSnapshot.read(s.p)
        #expect(afterBackfill.runUpserts == expected.count, "no record applied twice across the killed runs")

        // Deletions, found by sweeps that are killed once they have begun.
        let gone = Array(expected.keys.sorted().prefix(300))
        try await s.admin("records/delete", ["recordNames": gone])
        for name in gone { expected[name] = nil }
        try await s.waitForTheIndex()
        let resyncing = "SELECT coalesce(bool_or(resyncing), false) FROM \(quoteIdentifier(s.p.schema)).zonefeed_checkpoints"
        var sweepKills = 0
        for _ in 0..<6 where sweepKills < 3 {
            let running = try await zonefeed.start(["run", s.file, "--progress", "never"])
            s.p.kill(running, when: resyncing, delay: .microseconds(Int.random(in: 0...300_000)))
            let status = await running.wait().status
            if status == SIGKILL { sweepKills += 1 }
            try await s.p.waitForSessionsToEnd()
            if status == 0 { break }
        }
        let swept = try await s.run()
        #expect(swept.status == 0, "\(swept.stderr)")
        #expect(sweepKills >= 1, "a sweep was killed part way")
        #expect(try await s.differences(from: expected) == [])
        let snapshot = try await DestinationSnapshot.read(s.p)
        #expect(snapshot.runTombstones == gone.count, "each deletion tombstoned once")
        #expect(snapshot.runUpserts == afterBackfill.runUpserts, "a sweep writes no record")
        print(
            "public database: \(backfillKills) runs killed during a sliced backfill of \(s.generated().count) records, "
                + "\(sweepKills) during a sweep that found \(gone.count) deletions; the tables then equal the source")
    }

    /// The query endpoint meets what the others do: a server that throttles (429 with a
    /// `retryAfter`, and past three requests in flight), answers 503 and cuts answers short. The
    /// backfill retries its way through and ends equal to the source.
    @Test func aSlicedBackfillThroughThrottlingFaultsAndCutAnswersEqualsTheSource() async throws {
        let s = try await Setup("pubfault", seed: 307, records: 2_000, options: ["--max-in-flight", "3"])
        defer { s.stop() }
        _ = try await s.server.admin("faults/throttle", ["count": 3, "retryAfter": 0.2, "pathSuffix": "records/query"])
        _ = try await s.server.admin("faults/fail", ["status": 503, "count": 3, "pathSuffix": "records/query"])
        _ = try await s.server.admin("faults/cut", ["bytes": 100, "count": 2, "pathSuffix": "records/query"])
        let output = try await s.run()
        #expect(output.status == 0, "\(output.stderr)")
        #expect(try await s.differences(from: s.generated().mapValues { $0.recordChangeTag ?? "-" }) == [])
        #expect(try await s.server.admin("state").contains("\"faultsServed\":8"), "the eight faults were served")
    }

    /// What CloudKit refuses of a signed request, each said as what to do, with exit 3
    /// (authentication that needs a person); never the key, nor its ID.
    @Test(arguments: ["unknown key ID", "another key", "a clock 10 minutes off"])
    func aRefusedServerKeySaysWhatToFix(refusal: String) async throws {
        let s = try await Setup(
            "pubauth", seed: 304, records: 100, options: refusal == "a clock 10 minutes off" ? ["--clock-offset", "600"] : [],
            serverKnows: refusal == "another key" ? P256.Signing.PrivateKey() : nil
        ) { p in
            if refusal == "unknown key ID" { p.serverKey?.keyID = "K9-not-registered" }
        }
        defer { s.stop() }
        let output = try await s.run()
        #expect(output.status == 3, "\(output.stderr)")
        let said: String
        switch refusal {
        case "unknown key ID": said = "CloudKit does not know the server-to-server key ID (AUTHENTICATION_FAILED): set auth.serverKey.keyID"
        case "another key": said = "the server-to-server key does not match the key ID (AUTHENTICATION_FAILED)"
        default: said = "CloudKit refused the server-to-server signature as too old or too new (AUTHENTICATION_FAILED): set this machine's clock right"
        }
        #expect(output.stderr.contains(said), "\(output.stderr)")
        #expect(output.stderr.contains("CloudKit refused the pipeline's credentials: fix them, then run again."), "no sign-in is asked for")
        #expect(!output.stderr.contains("login"), "\(output.stderr)")
        let pem = try String(contentsOfFile: s.p.serverKey!.privateKeyFile, encoding: .utf8)
        let body = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        #expect(!(output.stderr + output.stdout).contains(body.prefix(24)), "the key never appears")
        #expect(!(output.stderr + output.stdout).contains("K9-not-registered"), "nor its ID")
    }

    /// A record that a sweep's answer gives as an error entry of its own (`TRY_AGAIN_LATER` for
    /// that record alone), or as an entry that cannot be read (its change tag not UTF-8), is
    /// still there: the sweep keeps its row. Left out of what the sweep listed, it was taken for
    /// deleted and tombstoned, and later passes, which read only what changed lately, never
    /// brought it back.
    @Test(arguments: ["an error entry", "an unreadable entry"])
    func aRecordASweepIsAnsweredWithAnErrorForKeepsItsRow(_ answer: String) async throws {
        let s = try await Setup("pubsweeperr", seed: 302, records: 200) {
            $0.moreCloudKit = ["deletionSweep: every 1 runs"]
        }
        defer { s.stop() }
        let expected = s.generated().mapValues { $0.recordChangeTag ?? "-" }
        let first = try await s.run()
        #expect(first.status == 0, "\(first.stderr)")
        #expect(try await s.differences(from: expected) == [])

        let name = try #require(expected.keys.sorted().dropFirst(7).first)
        let entry = "\"recordName\":\"\(name)\""
        // A quote, a byte that is never UTF-8, a quote.
        let replacement: [String: Any] =
            answer == "an error entry"
            ? ["find": entry, "replace": entry + ",\"serverErrorCode\":\"TRY_AGAIN_LATER\",\"reason\":\"busy\""]
            : ["find": "\"\(try #require(expected[name]))\"", "replaceBase64": "Iv8i"]
        _ = try await s.server.admin("faults/rewrite", ["count": 1_000, "pathSuffix": "records/query", "replacements": [replacement]])
        let second = try await s.run()
        #expect(second.status == 0, "\(second.stderr)")
        let state = try JSONSerialization.jsonObject(with: Data(try await s.server.admin("state").utf8)) as? [String: Any]
        #expect((state?["faultsServed"] as? Int ?? 0) > 0, "the sweep's answers were rewritten")
        #expect(try await s.differences(from: expected) == [], "the record answered with an error keeps its row")
        #expect(try await DestinationSnapshot.read(s.p).runTombstones == 0)
    }

    /// An answer without `records` (`{}` from a proxy, a body of another shape) was taken for
    /// an empty last page: a sweep then listed nothing and tombstoned every row of its times. It
    /// is refused as malformed, and the run fails with nothing tombstoned.
    @Test func aQueryAnswerWithoutRecordsIsRefusedNotTakenForAnEmptyPage() async throws {
        let s = try await Setup("pubnorecords", seed: 303, records: 120) {
            $0.moreCloudKit = ["deletionSweep: every 1 runs"]
            $0.retryBudgetSeconds = 5
        }
        defer { s.stop() }
        let expected = s.generated().mapValues { $0.recordChangeTag ?? "-" }
        let first = try await s.run()
        #expect(first.status == 0, "\(first.stderr)")
        #expect(try await s.differences(from: expected) == [])

        _ = try await s.server.admin("faults/fail", ["count": 1_000, "status": 200, "pathSuffix": "records/query", "body": [String: Any]()])
        let second = try await s.run()
        #expect(second.status == 1, "\(second.stderr)")
        #expect(second.stderr.contains("a query answer without records"), "\(second.stderr)")
        #expect(try await s.differences(from: expected) == [], "every row stays live")
        #expect(try await DestinationSnapshot.read(s.p).runTombstones == 0)
    }

    /// CloudKit's query index lags: an answer may give a record's current version at the place
    /// its index entry still has, so that its time is later than those of the records after it
    /// (the answers here say one record was modified at the latest time there is). The backfill
    /// went on from each page's latest time, so that slice's pages jumped past the record, and
    /// the records between were never read. Every record lands now.
    @Test func aRecordAheadOfItsPlaceInTheIndexPassesOverNoOther() async throws {
        let s = try await Setup("pubahead", seed: 304, records: 300, resultsLimit: 5)
        defer { s.stop() }
        let generated = s.generated()
        let expected = generated.mapValues { $0.recordChangeTag ?? "-" }
        let times = generated.values.compactMap { $0.modified?.timestamp }.sorted()
        let counts = Dictionary(times.map { ($0, 1) }, uniquingKeysWith: +)
        let ahead = try #require(times.dropFirst(times.count / 3).first { counts[$0] == 1 })
        let latest = try #require(times.last)
        _ = try await s.server.admin(
            "faults/rewrite",
            ["count": 10_000, "pathSuffix": "records/query", "replacements": [["find": "\"timestamp\":\(ahead)", "replace": "\"timestamp\":\(latest)"]]])

        let output = try await s.run()
        #expect(output.status == 0, "\(output.stderr)")
        let state = try JSONSerialization.jsonObject(with: Data(try await s.server.admin("state").utf8)) as? [String: Any]
        #expect((state?["faultsServed"] as? Int ?? 0) > 0, "the answers were rewritten")
        #expect(try await s.differences(from: expected) == [], "every record landed")
    }

    /// Records modified at one time, more than a page of them, are read across the page's end
    /// by the names already given; two names that are one String to Swift (`café` composed, and
    /// `cafe` with a combining accent) are two records, and both land. Compared as Strings, the
    /// second was taken for one already given and dropped.
    @Test func recordsAtOneTimeWhoseNamesDifferOnlyInTheirBytesBothLand() async throws {
        let s = try await Setup("pubties", seed: 303, records: 20, resultsLimit: 2)
        defer { s.stop() }
        let stamp = Self.nowMs() - 10_000
        // Pairs of one String and two names, each pair split by a page's end or not as the
        // server's order has it: the fake orders ties by a hash of the name's bytes.
        let names = [
            "caf\u{E9}", "cafe\u{301}", "r\u{E9}sum\u{E9}", "re\u{301}sume\u{301}", "na\u{EF}ve", "nai\u{308}ve", "\u{C5}ngstr\u{F6}m",
            "A\u{30A}ngstro\u{308}m", "\u{F1}o\u{F1}o", "n\u{303}on\u{303}o", "tie-1", "tie-2",
        ]
        let added = names.map {
            Record(
                recordName: $0, recordType: "Tag", recordChangeTag: "t-\($0.utf8.count)", fields: ["name": .string("tie")],
                created: RecordStamp(timestamp: stamp), modified: RecordStamp(timestamp: stamp))
        }
        try await s.admin("records/add", ["records": try FakeServerProcess.wire(added)])
        try await s.waitForTheIndex()
        let output = try await s.run()
        #expect(output.status == 0, "\(output.stderr)")
        let table = "\(quoteIdentifier(s.p.schema)).\(quoteIdentifier(s.p.tables["Tag"]!))"
        let landed = try await Connection.withConnectionOffPool(s.p.url) { c in
            try c.query("SELECT encode(convert_to(record_name, 'UTF8'), 'hex') FROM \(table) WHERE deleted_at IS NULL").rows.compactMap { $0[0] }
        }
        #expect(Set(names.map(\.utf8Hex)).isSubset(of: Set(landed)), "\(landed.count) live rows")
    }

    /// A record whose index entry came after every pass that could read it (stamped long before
    /// the watermark, where no pass looks again) was missing for good, until it changed: the
    /// next deletion sweep lists it, finds no row, and fetches it by name (`records/lookup`,
    /// which reads records, not the index). Only the records without rows are looked up, and one
    /// that does not fit is a reject once, not fetched and refused again at every sweep.
    @Test func aRecordEveryPassMissedIsFetchedByTheNextSweep() async throws {
        // Small batches: the sweep takes several, and the record missed, stamped before every
        // other, is listed in its first, not in the one that ends the sweep.
        let s = try await Setup("sweepfetch", seed: 305, records: 300) {
            $0.moreCloudKit = ["deletionSweep: every 1 runs"]
            $0.commitEvery = 10
        }
        defer { s.stop() }
        var expected = s.generated().mapValues { $0.recordChangeTag ?? "-" }
        let first = try await s.run()
        #expect(first.status == 0, "\(first.stderr)")
        #expect(try await s.differences(from: expected) == [])

        // Stamped in 2020, before every generated record (2023 on).
        let long = Int64(1_600_000_000_000)
        let late = Record(
            recordName: "LATE", recordType: "Tag", recordChangeTag: "late1", fields: ["name": .string("late")],
            created: RecordStamp(timestamp: long), modified: RecordStamp(timestamp: long))
        // Text where the Note's wordCount column takes a number: a reject, never coerced.
        let unfit = Record(
            recordName: "LATE-UNFIT", recordType: "Note", recordChangeTag: "unfit1", fields: ["wordCount": .string("many")],
            created: RecordStamp(timestamp: long), modified: RecordStamp(timestamp: long))
        try await s.admin("records/add", ["records": try FakeServerProcess.wire([late, unfit])])
        try await s.waitForTheIndex()
        _ = try await s.server.admin("stats/reset", [:])
        let second = try await s.run()
        #expect(second.status == 0, "\(second.stderr)")
        expected["LATE"] = "late1"
        #expect(try await s.differences(from: expected) == [])
        #expect(try await s.server.traffic()["lookedUp"] == 2, "the two records without a row were looked up")
        #expect(second.stderr.contains("fetching them by name"), "\(second.stderr)")
        #expect(try await DestinationSnapshot.read(s.p).rejects.map(\.recordName) == ["LATE-UNFIT"])

        _ = try await s.server.admin("stats/reset", [:])
        let third = try await s.run()
        #expect(third.status == 0, "\(third.stderr)")
        #expect(try await s.server.traffic()["lookedUp", default: 0] == 0, "a record rejected before is not fetched again")
        #expect(try await DestinationSnapshot.read(s.p).rejects.map(\.recordName) == ["LATE-UNFIT"])
        #expect(try await s.differences(from: expected) == [])
    }

    /// A lookup the server refuses as if the zone were gone (`ZONE_NOT_FOUND`, as a proxy or a
    /// broken server may answer) fails the zone and says why; it is not taken for the
    /// `_defaultZone` deleted, which would tombstone every row. The next sweep fetches the record.
    @Test func aLookupRefusedAsAZoneNotFoundDropsNoRow() async throws {
        let s = try await Setup("sweeprefused", seed: 306, records: 200) {
            $0.moreCloudKit = ["deletionSweep: every 1 runs"]
        }
        defer { s.stop() }
        var expected = s.generated().mapValues { $0.recordChangeTag ?? "-" }
        #expect(try await s.run().status == 0)
        let long = Int64(1_600_000_000_000)
        let late = Record(
            recordName: "LATE", recordType: "Tag", recordChangeTag: "late1", fields: [:],
            created: RecordStamp(timestamp: long), modified: RecordStamp(timestamp: long))
        try await s.admin("records/add", ["records": try FakeServerProcess.wire([late])])
        try await s.waitForTheIndex()
        _ = try await s.server.admin(
            "faults/fail", ["status": 404, "count": 1, "pathSuffix": "records/lookup", "serverErrorCode": "ZONE_NOT_FOUND", "reason": "gone?"])
        let refused = try await s.run()
        #expect(refused.status == 1, "\(refused.stderr)")
        #expect(refused.stderr.contains("looking up 1 of the 1 records a deletion sweep listed without a row failed"), "\(refused.stderr)")
        #expect(try await s.differences(from: expected) == [], "every row is still live")
        #expect(try await DestinationSnapshot.read(s.p).tombstonesByReason.isEmpty)

        let next = try await s.run()
        #expect(next.status == 0, "\(next.stderr)")
        expected["LATE"] = "late1"
        #expect(try await s.differences(from: expected) == [])
    }

    /// Records stamped as modified centuries or minutes ahead (a broken or hostile server, a
    /// client's clock) are applied, and later changes still arrive: the time reads go on from is
    /// never put past this machine's clock, where it was and the changes after it went unread.
    @Test func aRecordModifiedCenturiesAheadDoesNotHideTheChangesAfterIt() async throws {
        let s = try await Setup("pubfuture", seed: 304, records: 50)
        defer { s.stop() }
        let first = try await s.run()
        #expect(first.status == 0, "\(first.stderr)")
        let ahead = Self.nowMs() + 300 * 365 * 86_400_000
        try await s.admin(
            "records/add",
            [
                "records": try FakeServerProcess.wire([
                    Record(
                        recordName: "FROM-THE-FUTURE", recordType: "Tag", recordChangeTag: "f1", fields: ["name": .string("later")],
                        created: RecordStamp(timestamp: ahead), modified: RecordStamp(timestamp: ahead)),
                    // Nine minutes ahead, more than queryLag (5): taken as the watermark, the
                    // next pass would start four minutes from now.
                    Record(
                        recordName: "A-LITTLE-AHEAD", recordType: "Tag", recordChangeTag: "l1", fields: [:],
                        created: RecordStamp(timestamp: Self.nowMs() + 540_000), modified: RecordStamp(timestamp: Self.nowMs() + 540_000)),
                ])
            ])
        try await s.waitForTheIndex()
        let second = try await s.run()
        #expect(second.status == 0, "\(second.stderr)")
        #expect(second.stderr.contains("later than this machine's clock by more than 10 minutes"), "\(second.stderr)")
        try await s.admin(
            "records/add", ["records": try FakeServerProcess.wire([Record(recordName: "AFTER-IT", recordType: "Tag", recordChangeTag: "a1", fields: [:])])])
        try await s.waitForTheIndex()
        let third = try await s.run()
        #expect(third.status == 0, "\(third.stderr)")
        var expected = s.generated().mapValues { $0.recordChangeTag ?? "-" }
        expected["FROM-THE-FUTURE"] = "f1"
        expected["A-LITTLE-AHEAD"] = "l1"
        expected["AFTER-IT"] = "a1"
        #expect(try await s.differences(from: expected) == [])
    }

    /// A sweep's names are held until their batch commits, and its answers' bytes end a batch
    /// as a pass's do (`commitEveryBytes`): counted by how many names alone, a sweep of long
    /// names could hold gigabytes before its one commit.
    @Test func aSweepCommitsByTheBytesOfItsAnswers() async throws {
        let s = try await Setup("pubsweepbytes", seed: 306, records: 5_000, resultsLimit: 200) {
            $0.moreCloudKit = ["deletionSweep: every 1 runs"]
            $0.commitEvery = 100_000
            $0.commitEveryBytes = 1_048_576
        }
        defer { s.stop() }
        let expected = s.generated().mapValues { $0.recordChangeTag ?? "-" }
        // A row's xmin is the transaction that wrote it last: after the sweep, the sweep's
        // batches, each marking the rows it listed.
        let schema = quoteIdentifier(s.p.schema)
        let tables = s.p.mappedTypes.map { "\(schema).\(quoteIdentifier(s.p.tables[$0]!))" }
        let union = tables.map { "SELECT record_name, xmin::text AS x FROM \($0)" }.joined(separator: " UNION ALL ")
        func writers() async throws -> [String: String] {
            try await Connection.withConnectionOffPool(s.p.url) { c in
                Dictionary(uniqueKeysWithValues: try c.query(union).rows.map { (try $0.decode(0, as: String.self), try $0.decode(1, as: String.self)) })
            }
        }
        #expect(try await s.run().status == 0)
        let backfilled = try await writers()
        let sweep = try await s.run()
        #expect(sweep.status == 0, "\(sweep.stderr)")
        #expect(try await s.differences(from: expected) == [])
        let swept = try await writers()
        #expect(swept.count == backfilled.count && swept.count > 1_000)
        #expect(swept.allSatisfy { name, writer in backfilled[name] != writer }, "the sweep marked every row")
        let transactions = Set(swept.values)
        #expect(transactions.isDisjoint(with: Set(backfilled.values)))
        #expect(transactions.count >= 2, "a sweep of \(swept.count) rows in \(transactions.count) transactions")
    }

    /// A type whose modification time CloudKit cannot sort on fails the zone with the indexes to
    /// add (exit 1, nothing committed past it); once the index is there, the next run reads all.
    @Test func aMissingIndexSaysWhichToAdd() async throws {
        let s = try await Setup("pubindex", seed: 305, records: 400)
        defer { s.stop() }
        _ = try await s.server.admin("indexes/set", ["database": "public", "recordType": "Tag", "sortable": [String]()])
        let refused = try await s.run()
        #expect(refused.status == 1, "\(refused.stderr)")
        #expect(
            refused.stderr.contains(
                "CloudKit refused to query record type Tag: it has no ___modTime SORTABLE index (Field '___modTime' is not marked sortable (record type Tag)); "
                    + "in CloudKit Dashboard, add to Tag the indexes zonefeed needs: ___modTime QUERYABLE and SORTABLE, ___recordID QUERYABLE"),
            "\(refused.stderr)")

        _ = try await s.server.admin("indexes/set", ["database": "public", "recordType": "Tag"])
        let fixed = try await s.run()
        #expect(fixed.status == 0, "\(fixed.stderr)")
        #expect(try await s.differences(from: s.generated().mapValues { $0.recordChangeTag ?? "-" }) == [])
    }

    /// `zonefeed watch` on the public database: query subscriptions for each type, and a
    /// deletion that arrives by its notification, with no sweep and no poll to find it.
    @Test(.onItsOwnThread) func aWatcherOnQuerySubscriptionsBringsADeletionWithoutASweep() async throws {
        let s = try await Setup("pubwatch", seed: 306, records: 600) {
            $0.moreCloudKit = ["deletionSweep: never"]
        }
        defer { s.stop() }
        try await s.server.admin("notifications", ["courierTimeoutMilliseconds": 1000])
        var z = s.zonefeed
        z.environment.merge(s.p.environment) { _, new in new }
        // A safety poll an hour away: only a notification can bring the deletion in time.
        let watching = try await z.start(["watch", s.file, "--poll-interval", "3600"])
        var state = ""
        for _ in 0..<400 where !state.contains("\"registeredTokens\":1") {
            state = try await s.server.admin("state")
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(state.contains("\"registeredTokens\":1"), "the watcher registered a push token: \(state)")
        let expected = s.generated()
        let caughtUp = await WatchTests.within(.seconds(60)) { try await s.differences(from: expected.mapValues { $0.recordChangeTag ?? "-" }).isEmpty }
        #expect(caughtUp != nil, "the watcher caught up: \(watching.stderrSoFar)")
        #expect(try await s.server.admin("state").contains("\"subscriptions\":3"), "a query subscription for each of the three types")

        let gone = try #require(expected.keys.sorted().first)
        try await s.admin("records/delete", ["recordNames": [gone]])
        let tombstoned = await WatchTests.within(.seconds(30)) {
            try await DestinationSnapshot.read(s.p).rows[ExpectedState.Key(zoneName: ZoneID.defaultZoneName, recordName: gone)]?.deleted == true
        }
        #expect(tombstoned != nil, "the deletion arrived by its notification: \(watching.stderrSoFar)")
        let snapshot = try await DestinationSnapshot.read(s.p)
        #expect(snapshot.tombstonesByReason == ["deleted": 1], "a tombstone of the deletion itself, not of a sweep")
        let stopped = await watching.stop()
        #expect(stopped.status == 0 || stopped.status == 143, "\(stopped.stderr)")
        print("public database: a deletion notified through a query subscription was tombstoned after \(tombstoned.map { "\($0)" } ?? "never")")
    }

    @Test func aPrivateDefaultZoneIsReadBesideCustomZonesInOnePipeline() async throws {
        let p = try await FakePipeline(prefix: "privdefault", fake: FakeSettings(seed: 302, zones: 2, recordsPerZone: 300))
        let zonefeed = try ZonefeedBinary(environment: p.environment)
        defer { zonefeed.remove() }
        let server = try await FakeServerProcess(
            zonefeed, seed: 302, zones: 2, recordsPerZone: 300, options: FakeServerProcess.strict + ["--index-lag", "0,200"])
        defer { server.stop() }
        let stamp = Self.nowMs()
        let notes = (0..<120).map { i in
            Record(
                recordName: "DEFAULT-\(i)", recordType: "Note", recordChangeTag: "d\(i)", fields: ["title": .string("in the default zone")],
                created: RecordStamp(timestamp: stamp), modified: RecordStamp(timestamp: stamp + Int64(i % 7)))
        }
        _ = try await server.admin("records/add", ["zone": ZoneID.defaultZoneName, "records": try FakeServerProcess.wire(notes)])
        var pipeline = p
        pipeline.serverURL = server.url
        pipeline.zones = "[_defaultZone, Zone01, Zone02]"
        let file = try pipeline.write(to: zonefeed.directory)
        try await Self.waitForTheIndex(of: server, database: "private")
        let output = try await zonefeed.run(["run", file, "--progress", "never"])
        #expect(output.status == 0, "\(output.stderr)")

        let snapshot = try await DestinationSnapshot.read(pipeline)
        let expected = pipeline.expected()
        for (key, row) in expected.rows where !row.deleted {
            #expect(snapshot.rows[key]?.changeTag == row.record.recordChangeTag, "\(key.zoneName)/\(key.recordName)")
        }
        let inDefault = snapshot.rows.filter { $0.key.zoneName == ZoneID.defaultZoneName && !$0.value.deleted }
        #expect(inDefault.count == 120)
        #expect(inDefault.values.allSatisfy { $0.recordType == "Note" })
        print("private _defaultZone beside Zone01 and Zone02:\n\(output.stdout)")
    }
}
