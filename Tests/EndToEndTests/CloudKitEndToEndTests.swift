import CloudKitModel
import FakeCloudKit
import Foundation
import LibPQ
import TestSupport
import Testing
import ZoneFeed

/// The real CloudKit client, in the built binary, against `zonefeed fake-server` over loopback,
/// into a real PostgreSQL.
@Suite struct CloudKitEndToEndTests {
    struct Setup {
        var p: FakePipeline
        let zonefeed: ZonefeedBinary
        let server: FakeServerProcess
        var file: String

        init(
            _ prefix: String, fake: FakeSettings, server options: [String] = FakeServerProcess.strict,
            configure: (inout FakePipeline) -> Void = { _ in }
        ) async throws {
            p = try await FakePipeline(prefix: prefix, fake: fake)
            zonefeed = try ZonefeedBinary(environment: p.environment)
            server = try await FakeServerProcess(
                zonefeed, seed: fake.seed, zones: fake.zones, recordsPerZone: fake.recordsPerZone, options: options)
            p.serverURL = server.url
            // Over TLS (`--tls` among the options) the pipeline trusts the CA the server made.
            if let caFile = server.caFile { p.moreCloudKit += ["tls:", "  caFile: \(caFile)"] }
            configure(&p)
            file = try p.write(to: zonefeed.directory)
        }

        /// Keeps the next CloudKit request whose path ends in `pathSuffix` at the server (a gate
        /// of two that only `faults/clear` opens, or two minutes), and returns once the one `send`
        /// brings about is kept there; nil when none was within 120 s.
        func holdTheNextRequest(to pathSuffix: String, sentBy send: () async throws -> Void) async throws -> Duration? {
            _ = try await server.admin("faults/gate", ["count": 2, "pathSuffix": pathSuffix, "milliseconds": 120_000])
            try await send()
            return await WatchTests.within(.seconds(120)) {
                let state = try JSONSerialization.jsonObject(with: Data(try await server.admin("state").utf8)) as? [String: Any]
                return (state?["keptAtGates"] as? NSNumber)?.intValue == 1
            }
        }

        func run(_ extra: [String] = []) async throws -> ZonefeedBinary.Output {
            var z = zonefeed
            z.environment.merge(p.environment) { _, new in new }
            return try await z.run(["run", file, "--progress", "never"] + extra)
        }

        /// The token file's lines, the newest token first.
        func tokenFileLines(_ path: String? = nil) throws -> [String] {
            let file = zonefeed.directory.appendingPathComponent(path ?? p.webAuthTokenFile ?? ".zonefeed/\(p.name).web-auth-token").path
            return try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n").map(String.init)
        }

        /// Adds a Tag record to a zone at the server; `hasRow` finds it after a run.
        func addTag(_ name: String, to zone: String) async throws {
            try await server.admin(
                "records/add",
                [
                    "zone": zone,
                    "records": try FakeServerProcess.wire([
                        Record(recordName: name, recordType: "Tag", recordChangeTag: "\(name)-1", fields: [:])
                    ]),
                ])
        }

        func hasRow(_ name: String, in zone: String) async throws -> Bool {
            try await DestinationSnapshot.read(p).rows[ExpectedState.Key(zoneName: zone, recordName: name)] != nil
        }

        func stop() {
            server.stop()
            zonefeed.remove()
        }

        /// A nil-token fetch is a snapshot of the live records: the rows equal the live part of
        /// the expected state, and nothing else but the live rows of records the test `added`
        /// at the server.
        func liveDifferences(besides added: Set<String> = []) async throws -> [String] {
            let expected = p.expected()
            let snapshot = try await DestinationSnapshot.read(p)
            var out: [String] = []
            for (key, row) in expected.rows where !row.deleted {
                let found = snapshot.rows[key]
                if found?.changeTag != row.record.recordChangeTag || found?.deleted != false {
                    out.append("\(key.recordName): expected \(row.record.recordChangeTag ?? "-"), found \(found.map(\.description) ?? "no row")")
                }
            }
            for (key, row) in snapshot.rows where expected.rows[key].map({ $0.deleted }) ?? true {
                if added.contains(key.recordName) && !row.deleted { continue }
                out.append("\(key.recordName): not live at the source, but has a row")
            }
            return Array(out.prefix(10))
        }
    }

    @Test func backfillAndIncrementalRunsOverHTTPMatchTheSourceColumnByColumn() async throws {
        let s = try await Setup("httpfeed", fake: FakeSettings(seed: 51, zones: 2, recordsPerZone: 1_500))
        defer { s.stop() }
        let first = try await s.run()
        #expect(first.status == 0, "\(first.stderr)")
        #expect(try await s.liveDifferences() == [])
        let columns = try await NoteColumns.differences(s.p, expected: s.p.expected())
        #expect(columns == [], "\(columns)")

        // An incremental run brings a new record with every field type, an update and a deletion.
        let expected = s.p.expected()
        let live = expected.rows.filter { !$0.value.deleted && $0.key.zoneName == "Zone01" }.sorted { $0.key < $1.key }
        var updated = live[0].value.record
        updated.recordChangeTag = "updated-1"
        updated.fields["title"] = .string("Edited over HTTP ✓")
        let fresh = Record(
            recordName: "FRESH-1", recordType: "Note", recordChangeTag: "fresh-1",
            fields: [
                "title": .string("naïve café 日本語"), "wordCount": .int64(9_007_199_254_740_993), "rating": .double(-2.5),
                "editedAt": .timestamp(-62_135_596_800_000), "thumbnail": .bytes("AAECAw=="),
                "folder": .reference(Reference(recordName: "FOLDER-1")),
                "attachment": .asset(tag: "ASSETID", .object(["fileChecksum": .string("abc"), "size": .int(12)])),
                "place": .location(.object(["latitude": .double(1.5), "longitude": .double(-3)])),
                "tags": .list(tag: "STRING_LIST", [.string("a"), .string("b\"c")]),
                "counts": .list(tag: "INT64_LIST", [.int64(.min), .int64(.max)]),
                "scores": .list(tag: "DOUBLE_LIST", [.double(0.5)]),
                "reminders": .list(tag: "TIMESTAMP_LIST", [.timestamp(1_700_000_000_123)]),
                "chunks": .list(tag: "BYTES_LIST", [.bytes("/w==")]),
                "related": .list(tag: "REFERENCE_LIST", [.reference(Reference(recordName: "R-9"))]),
                "mystery": .unknown(tag: "FUTURE_TYPE", .object(["x": .int(1)])),
            ],
            created: RecordStamp(timestamp: 1_700_000_000_000, userRecordName: "_u1"),
            modified: RecordStamp(timestamp: 1_700_000_000_500, userRecordName: "_u2"))
        try await s.server.admin("records/add", ["zone": "Zone01", "records": try FakeServerProcess.wire([updated, fresh])])
        try await s.server.admin("records/delete", ["zone": "Zone01", "recordNames": [live[1].key.recordName]])

        let second = try await s.run()
        #expect(second.status == 0, "\(second.stderr)")
        #expect(second.stdout.contains("2 upserted, 1 tombstoned"), "\(second.stdout)")
        let row = try Connection.withConnection(s.p.url) { c in
            try c.query(
                """
                SELECT title, word_count::text, rating::text, (extract(epoch FROM edited_at) * 1000)::bigint::text, encode(thumbnail, 'hex'),
                       folder, attachment->>'size', place->>'latitude', array_to_string(tags, '|'), array_to_string(counts, ','),
                       array_to_string(chunks, ','), array_to_string(related_notes, ','), fields->'mystery'->>'type'
                FROM \(quoteIdentifier(s.p.schema)).notes WHERE record_name = 'FRESH-1'
                """
            ).rows.first.map(Array.init)
        }
        #expect(
            row == [
                "naïve café 日本語", "9007199254740993", "-2.5", "-62135596800000", "00010203", "FOLDER-1", "12", "1.5",
                "a|b\"c", "-9223372036854775808,9223372036854775807", "\\xff", "R-9", "FUTURE_TYPE",
            ])
        let after = try await DestinationSnapshot.read(s.p)
        let key = ExpectedState.Key(zoneName: "Zone01", recordName: updated.recordName)
        #expect(after.rows[key]?.changeTag == "updated-1")
        #expect(after.rows[live[1].key]?.deleted == true)
        #expect(after.tombstonesByReason["deleted"] == 1)
    }

    @Test func aDeletedRecordThatIsCreatedAgainComesBackToLife() async throws {
        let s = try await Setup("recreate", fake: FakeSettings(seed: 53, zones: 1, recordsPerZone: 300))
        defer { s.stop() }
        #expect(try await s.run().status == 0)
        let name = s.p.expected().rows.first { !$0.value.deleted }!.key.recordName
        try await s.server.admin("records/delete", ["zone": "Zone01", "recordNames": [name]])
        #expect(try await s.run().status == 0)
        let key = ExpectedState.Key(zoneName: "Zone01", recordName: name)
        #expect(try await DestinationSnapshot.read(s.p).rows[key]?.deleted == true)

        let again = Record(recordName: name, recordType: "Tag", recordChangeTag: "reborn", fields: ["label": .string("again")])
        try await s.server.admin("records/add", ["zone": "Zone01", "records": try FakeServerProcess.wire([again])])
        #expect(try await s.run().status == 0)
        let row = try await DestinationSnapshot.read(s.p).rows[key]
        #expect(row?.deleted == false && row?.changeTag == "reborn")
    }

    @Test func deletedAndPurgedZonesAreTombstonedAndRemoved() async throws {
        let s = try await Setup("zones", fake: FakeSettings(seed: 55, zones: 3, recordsPerZone: 400))
        defer { s.stop() }
        #expect(try await s.run().status == 0)
        let before = try await DestinationSnapshot.read(s.p)
        let liveIn = { (zone: String) in before.rows.filter { $0.key.zoneName == zone && !$0.value.deleted }.count }

        try await s.server.admin("zones/delete", ["zone": "Zone01"])
        try await s.server.admin("zones/purge", ["zone": "Zone02"])
        let output = try await s.run()
        #expect(output.status == 0, "\(output.stderr)")

        let after = try await DestinationSnapshot.read(s.p)
        #expect(after.tombstonesByReason["zone_deleted"] == liveIn("Zone01"))
        #expect(after.tombstonesByReason["zone_purged"] == liveIn("Zone02"))
        #expect(after.rows.filter { $0.key.zoneName == "Zone01" }.allSatisfy { $0.value.deleted })
        #expect(!after.rows.keys.contains { $0.zoneName == "Zone02" })
        #expect(after.rows.filter { $0.key.zoneName == "Zone03" } == before.rows.filter { $0.key.zoneName == "Zone03" })
    }

    /// A zone is deleted while the database feed's token expires. Read again from its start, the
    /// feed names live zones only, so the deletion is never reported: every zone followed so far
    /// is fetched as well, and the deleted one, which the server no longer knows, has its rows
    /// tombstoned and its checkpoint dropped. Before, nothing fetched it again, and its rows
    /// stayed live for ever.
    @Test func aZoneDeletedWhileTheDatabaseTokenExpiredIsFoundByFetchingIt() async throws {
        let s = try await Setup("dbexpire", fake: FakeSettings(seed: 61, zones: 3, recordsPerZone: 200))
        defer { s.stop() }
        #expect(try await s.run().status == 0)
        let before = try await DestinationSnapshot.read(s.p)
        let live = before.rows.filter { $0.key.zoneName == "Zone02" && !$0.value.deleted }.count
        try await s.server.admin("zones/delete", ["zone": "Zone02"])
        try await s.server.admin("database/expire-tokens")

        let output = try await s.run()
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stderr.contains("the database change token is no longer accepted"), "\(output.stderr)")
        let after = try await DestinationSnapshot.read(s.p)
        #expect(live > 0 && after.tombstonesByReason["zone_deleted"] == live, "\(after.tombstonesByReason)")
        #expect(after.rows.filter { $0.key.zoneName == "Zone02" }.allSatisfy { $0.value.deleted })
        for zone in ["Zone01", "Zone03"] {
            #expect(after.rows.filter { $0.key.zoneName == zone } == before.rows.filter { $0.key.zoneName == zone }, "\(zone) is as it was")
        }
        let checkpoints = try Connection.withConnection(s.p.url) { c in
            try c.query("SELECT zone_name FROM \(quoteIdentifier(s.p.schema)).zonefeed_checkpoints WHERE scope = 'zone' ORDER BY 1").rows.map { $0[0] }
        }
        #expect(checkpoints == ["Zone01", "Zone03"], "the deleted zone's checkpoint is dropped")
        #expect(try await s.run().status == 0, "the next run reads the new database token")
    }

    @Test func aTokenExpiredWhileRecordsWereDeletedIsResyncedAndTheyAreSwept() async throws {
        let s = try await Setup("expire", fake: FakeSettings(seed: 57, zones: 1, recordsPerZone: 600))
        defer { s.stop() }
        #expect(try await s.run().status == 0)
        let gone = s.p.expected().rows.filter { !$0.value.deleted }.keys.sorted().prefix(3).map(\.recordName)
        try await s.server.admin("records/delete", ["zone": "Zone01", "recordNames": gone])
        try await s.server.admin("zones/expire-tokens", ["zone": "Zone01"])

        let output = try await s.run()
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stdout.contains("3 rows no longer at the source were tombstoned"), "\(output.stdout)")
        let after = try await DestinationSnapshot.read(s.p)
        #expect(after.tombstonesByReason["resync"] == 3)
        #expect(gone.allSatisfy { after.rows[ExpectedState.Key(zoneName: "Zone01", recordName: $0)]?.deleted == true })
        #expect(after.rows.values.filter { !$0.deleted }.count == s.p.expected().liveCount - 3)
    }

    /// A resync's pages may give a record as an error entry of its own (`TRY_AGAIN_LATER` for
    /// that record alone) or as an entry that cannot be read (text that is not UTF-8). Both
    /// records are at the source: each is a reject and keeps its row as it was. Before, the
    /// sweep at the resync's end took both for deleted and tombstoned them. A Tag whose name a
    /// record of a type without a table took (a reject, with `unknownRecordTypes: reject`) is
    /// no record's now: its row is swept, as before.
    @Test func recordsAResyncCannotApplyKeepTheirRows() async throws {
        let s = try await Setup("resyncrej", fake: FakeSettings(seed: 59, zones: 1, recordsPerZone: 300)) { $0.unknownRecordTypes = "reject" }
        defer { s.stop() }
        let kept = [
            Record(recordName: "KEPT-ERROR", recordType: "Note", recordChangeTag: "k1", fields: ["title": .string("fine")]),
            Record(recordName: "KEPT-BYTES", recordType: "Note", recordChangeTag: "k2", fields: ["title": .string("MARK-BYTES")]),
            Record(recordName: "RETYPED", recordType: "Tag", recordChangeTag: "r1", fields: ["label": .string("old")]),
        ]
        try await s.server.admin("records/add", ["zone": "Zone01", "records": try FakeServerProcess.wire(kept)])
        #expect(try await s.run().status == 0)
        let before = try await DestinationSnapshot.read(s.p)
        // The Tag's name taken by a Widget, so that the next run fetches the zone, with a token
        // that is no longer good.
        try await s.server.admin("records/delete", ["zone": "Zone01", "recordNames": ["RETYPED"]])
        let widget = Record(recordName: "RETYPED", recordType: "Widget", recordChangeTag: "w1", fields: [:])
        try await s.server.admin("records/add", ["zone": "Zone01", "records": try FakeServerProcess.wire([widget])])
        try await s.server.admin("zones/expire-tokens", ["zone": "Zone01"])
        try await s.server.admin(
            "faults/rewrite",
            [
                "zone": "Zone01", "count": 50, "pathSuffix": "records/changes",
                "replacements": [
                    ["find": "\"KEPT-ERROR\"", "replace": "\"KEPT-ERROR\",\"serverErrorCode\":\"TRY_AGAIN_LATER\",\"reason\":\"busy\""],
                    ["find": "MARK-BYTES", "replaceBase64": "//5B"],
                ],
            ])

        let output = try await s.run()
        #expect(output.status == 0, "\(output.stderr)")
        let after = try await DestinationSnapshot.read(s.p)
        let rejected = Set(after.rejects.compactMap(\.recordName).filter { $0.hasPrefix("KEPT") || $0 == "RETYPED" })
        #expect(rejected == ["KEPT-ERROR", "KEPT-BYTES", "RETYPED"], "all three are rejects: \(after.rejects)")
        #expect(after.tombstonesByReason["resync"] == 1, "the Tag alone left the source: \(after.tombstonesByReason)")
        for name in ["KEPT-ERROR", "KEPT-BYTES"] {
            let key = ExpectedState.Key(zoneName: "Zone01", recordName: name)
            #expect(after.rows[key] != nil && after.rows[key] == before.rows[key], "\(name) keeps its row: \(String(describing: after.rows[key]))")
        }
        #expect(after.rows[ExpectedState.Key(zoneName: "Zone01", recordName: "RETYPED")]?.deleted == true, "the Tag's row is swept")
        let changed = before.rows.filter { after.rows[$0.key] != $0.value }.keys.map(\.recordName)
        #expect(changed == ["RETYPED"], "the resync found every other record as it was")
    }

    /// One request at a time, throttled twice: each wait holds every request back, and the run
    /// reports the 1.6 s it waited, in its summary, its ledger and `status`.
    @Test func throttlingIsWaitedOutAsTheServerAsksAndReported() async throws {
        let s = try await Setup("throttle", fake: FakeSettings(seed: 59, zones: 1, recordsPerZone: 200))
        defer { s.stop() }
        try await s.server.admin("faults/throttle", ["count": 2, "retryAfter": 0.8, "pathSuffix": "records/changes"])
        let started = ContinuousClock.now
        let output = try await s.run()
        let elapsed = ContinuousClock.now - started
        #expect(output.status == 0, "\(output.stderr)")
        #expect(elapsed >= .milliseconds(1_600), "two retryAfter waits of 0.8 s")
        #expect(output.stderr.contains("THROTTLED"))
        let waited = try throttledSeconds(s)
        #expect(waited >= 1.6 && waited < elapsed.seconds, "\(waited) s")
        #expect(output.stdout.contains(String(format: "throttled   %.1f s waiting", waited)), "\(output.stdout)")
        try await expectStatusShows(waited, s)
        #expect(try await s.liveDifferences() == [])
    }

    /// The seconds the pipeline's last run recorded as waited because CloudKit throttled it.
    private func throttledSeconds(_ s: Setup) throws -> Double {
        let text = try Connection.withConnection(s.p.url) { c in
            try c.query("SELECT throttled_seconds FROM \(quoteIdentifier(s.p.schema)).zonefeed_runs ORDER BY run_id DESC LIMIT 1").scalar
        }
        return try #require(text.flatMap(Double.init))
    }

    private func expectStatusShows(_ waited: Double, _ s: Setup) async throws {
        var z = s.zonefeed
        z.environment.merge(s.p.environment) { _, new in new }
        let status = try await z.run(["status", s.file])
        #expect(status.stdout.contains(String(format: "%.1f s", waited)), "status shows the run's wait: \(status.stdout)")
    }

    @Test func aRejectedWebAuthTokenStopsTheRunWithExitCode3AndNoSecret() async throws {
        let s = try await Setup("auth", fake: FakeSettings(seed: 61, zones: 1, recordsPerZone: 100)) { $0.webAuthToken = "stale+token/that=leaks" }
        defer { s.stop() }
        let output = try await s.run()
        #expect(output.status == 3)
        #expect(output.stderr.contains("web auth token"), "\(output.stderr)")
        #expect(!output.stderr.contains("stale") && !output.stdout.contains("stale"))
        #expect(!output.stderr.contains("fake-api-token"))
    }

    @Test func rotatedTokensArePersistedAndUsedWhenTheConfiguredOneIsStale() async throws {
        let s = try await Setup("rotate", fake: FakeSettings(seed: 63, zones: 1, recordsPerZone: 100))
        defer { s.stop() }
        #expect(try await s.run().status == 0)
        let tokenFile = s.zonefeed.directory.appendingPathComponent(s.p.webAuthTokenFile!).path
        let stored = try s.tokenFileLines().first ?? ""
        #expect(!stored.isEmpty && stored != s.p.webAuthToken)
        let mode = try FileManager.default.attributesOfItem(atPath: tokenFile)[.posixPermissions] as? Int
        #expect(mode == 0o600)

        try await s.server.admin("auth/revoke", ["initial": true])
        try await s.addTag("AFTER-ROTATION", to: "Zone01")
        let second = try await s.run()
        #expect(second.status == 0, "\(second.stderr)")
        #expect(try await s.hasRow("AFTER-ROTATION", in: "Zone01"))
    }

    /// Only a person can mend it (sign in as the pipeline's own account, or name a new pipeline):
    /// exit 3, which a scheduler does not retry; it was 1, retried for ever.
    @Test func aDifferentUserBehindTheTokenStopsTheRun() async throws {
        let s = try await Setup("account", fake: FakeSettings(seed: 65, zones: 1, recordsPerZone: 100))
        defer { s.stop() }
        #expect(try await s.run().status == 0)
        try await s.server.admin("user", ["userRecordName": "_someoneElse"])
        let output = try await s.run()
        #expect(output.status == 3)
        #expect(output.stderr.contains("_someoneElse"), "\(output.stderr)")
        #expect(try await DestinationSnapshot.read(s.p).runStatuses.last == "failed")
    }

    /// SIGKILL at random moments of a backfill against a server that accepts a token only until
    /// two newer ones have been used: no run may ever be locked out. Every other kill comes
    /// after the run's first commit, the rest at any moment, startup included.
    /// `ZONEFEED_TEST_KILLS` sets how many (8 unless told), and the backfill grows with it so
    /// that it outlasts them, even when a kill comes seconds late: the thread that times it can
    /// wait that long for a core on a loaded machine, and a round that finishes the backfill
    /// leaves the later ones nothing to be killed in (CI once saw 3 kills of 8 so, with 6,000
    /// entries a zone).
    /// The tokens are kept in the file, or in the destination database (`webAuthTokenStore:
    /// database`, for pods whose disk does not outlive the run).
    @Test(arguments: ["file", "database"])
    func killedAtRandomPointsAgainstTheServerThenResumedMatchesTheSource(tokenStore: String) async throws {
        let environment = ProcessInfo.processInfo.environment
        let wanted = min(max(environment["ZONEFEED_TEST_KILLS"].flatMap(Int.init) ?? 8, 1), 10_000)
        // `issue` measures the harshest reading of token rotation (README, "Web auth tokens").
        let retirement = environment["ZONEFEED_TEST_TOKEN_RETIREMENT"] ?? "use"
        let s = try await Setup(
            "httpcrash", fake: FakeSettings(seed: 67, zones: 4, recordsPerZone: max(16_000, wanted * 2_000)),
            // Answers 80 ms away, so that a backfill outlasts a kill up to 400 ms after its start
            // however fast the client gets (at 20 ms, a run finished the whole of it in time).
            server: ["--token-window", "2", "--latency", "80,20", "--token-retirement", retirement]
        ) {
            $0.commitEvery = 400
            if tokenStore == "database" {
                $0.webAuthTokenStore = "database"
                $0.webAuthTokenFile = nil
            }
        }
        defer { s.stop() }
        var kills = 0
        var lockedOut: [String] = []
        var rounds: [String] = []  // each run's exit status and the records applied after it
        for round in 0..<wanted {
            var z = s.zonefeed
            z.environment.merge(s.p.environment) { _, new in new }
            let appliedBefore = try await s.p.recordsApplied()
            let running = try await z.start(["run", s.file, "--progress", "never"])
            let delay = Duration.microseconds(Int.random(in: 0...400_000))
            // Even rounds die mid-work (a moment after the run's first commit), odd ones at a
            // moment counted from the start, which may fall in its set-up: a run that finds
            // little work left can end before a moment of the second kind.
            if round % 2 == 0 { s.p.kill(running, afterProgressBeyond: appliedBefore, delay: delay) } else { running.kill(after: delay) }
            let output = await running.wait()
            rounds.append("\(output.status)@\(try await s.p.recordsApplied())")
            if output.status == SIGKILL {
                kills += 1
            } else if output.status == 3 {
                lockedOut.append(output.stderr)
            }
            try await s.p.waitForSessionsToEnd()
        }
        let final = try await s.run()
        print(
            "killed \(kills) of \(wanted) runs at random moments (tokens in the \(tokenStore), retired on \(retirement)); \(lockedOut.count) locked out; final run exit \(final.status)"
        )
        #expect(lockedOut == [], "a run was locked out")
        #expect(final.status == 0, "\(final.stderr)")
        #expect(kills >= max(1, (wanted + 1) / 2), "most runs were killed rather than finished: \(rounds)")
        #expect(try await s.liveDifferences() == [])
    }

    /// A CronJob's pod keeps nothing on disk: with `webAuthTokenStore: database` the second run,
    /// in another folder, starts from the token the first one received last, though the server
    /// accepts only the newest two and the configured one is long retired.
    @Test func withTheDatabaseStoreTheNextProcessStartsFromTheNewestTokenWithNoFileAnywhere() async throws {
        let s = try await Setup("dbtoken", fake: FakeSettings(seed: 73, zones: 3, recordsPerZone: 900)) {
            $0.webAuthTokenStore = "database"
            $0.webAuthTokenFile = nil
        }
        defer { s.stop() }
        var z = s.zonefeed
        z.environment.merge(s.p.environment) { _, new in new }
        let validate = try await z.run(["validate", s.file])
        #expect(validate.stdout.contains("webAuthTokenStore database (table \(s.p.schema).zonefeed_web_auth_tokens)"), "\(validate.stdout)")

        let first = try await s.run()
        #expect(first.status == 0, "\(first.stderr)")
        let saved = try savedTokens(s)
        #expect(saved.first != s.p.webAuthToken, "the newest token is a rotated one")
        #expect(!saved.isEmpty)
        // The table is the only place: no file in the working folder.
        let files = try FileManager.default.subpathsOfDirectory(atPath: s.zonefeed.directory.path)
        #expect(!files.contains { $0.contains("web-auth-token") }, "\(files)")
        // Whoever can read the table can act as the user: PUBLIC gets nothing on it.
        let publicCanRead = try Connection.withConnection(s.p.url) { c in
            try c.query(
                "SELECT coalesce(bool_or(grantee = 0), false) FROM pg_class, aclexplode(coalesce(relacl, acldefault('r', relowner))) WHERE oid = $1::regclass",
                ["\(quoteIdentifier(s.p.schema)).zonefeed_web_auth_tokens"]
            ).scalar(as: Bool.self)
        }
        #expect(publicCanRead == false)

        // The next process, as a new pod would: another working folder, the same database.
        try await s.server.admin("stats/reset")
        try await s.addTag("NEXT-POD", to: "Zone02")
        var next = try ZonefeedBinary(environment: s.p.environment)
        defer { next.remove() }
        next.environment.merge(s.p.environment) { _, new in new }
        let nextFile = try s.p.write(to: next.directory)
        let second = try await next.run(["run", nextFile, "--progress", "never"])
        #expect(second.status == 0, "the second process started from the stored token: \(second.stderr)")
        #expect(try await s.hasRow("NEXT-POD", in: "Zone02"))
        #expect(try await s.server.traffic()["staleTokenRefusals", default: 0] == 0, "no request carried a retired token")
        #expect(try savedTokens(s).first != saved.first, "the second run saved its own newest token")
        #expect(!second.stderr.contains(saved.first ?? "-") && !first.stderr.contains(saved.first ?? "-"), "no token in the logs")

        // What the table spared: a pod that starts from the configured token alone is locked out.
        try Connection.withConnection(s.p.url) { c in
            _ = try c.query("DELETE FROM \(quoteIdentifier(s.p.schema)).zonefeed_web_auth_tokens WHERE pipeline = $1", [s.p.name])
        }
        let withoutTable = try await next.run(["run", nextFile, "--progress", "never"])
        #expect(withoutTable.status == 3, "the configured token was retired long ago: \(withoutTable.stderr)")
    }

    /// The tokens a pipeline keeps in its database table, newest first.
    func savedTokens(_ s: Setup) throws -> [String] {
        try Connection.withConnection(s.p.url) { c in
            let text: String = try c.query(
                "SELECT tokens FROM \(quoteIdentifier(s.p.schema)).zonefeed_web_auth_tokens WHERE pipeline = $1", [s.p.name]
            ).rows[0].decode(0)
            // The token file's format: the newest token alone on the first line, then `earlier=` lines.
            let lines = text.split(separator: "\n").map(String.init)
            return Array(lines.prefix(1)) + lines.dropFirst().filter { $0.hasPrefix("earlier=") }.map { String($0.dropFirst(8)) }
        }
    }

    /// The last rotated token cannot be saved (here its file became a folder while the run's
    /// last request was answered): the run's rows are committed, so its summary is printed and
    /// its row says succeeded, and it ends with exit 1 saying the token was not saved. Before, the
    /// failure at the source's shutdown replaced the run's result: no summary, and metrics that
    /// said the run never started.
    @Test func aTokenThatCannotBeSavedAtTheEndFailsTheRunButKeepsItsSummary() async throws {
        // The held request must outlast the test's steps on a loaded machine (CI's full suite):
        // the client waits for its answer long enough.
        let s = try await Setup("tokenunsaved", fake: FakeSettings(seed: 70, zones: 1, recordsPerZone: 20)) {
            $0.moreCloudKit = ["timeoutSeconds: 600", "idleTimeoutSeconds: 600"]
        }
        defer { s.stop() }
        let tokenFile = s.zonefeed.directory.appendingPathComponent(s.p.webAuthTokenFile!).path
        let metricsFile = s.zonefeed.directory.appendingPathComponent("unsaved.prom").path
        var z = s.zonefeed
        z.environment.merge(s.p.environment) { _, new in new }
        var started: ZonefeedBinary.Running?
        let held = try await s.holdTheNextRequest(to: "records/changes") {
            started = try await z.start(["run", s.file, "--progress", "never", "--metrics-file", metricsFile])
        }
        let run = try #require(started)
        try #require(held != nil, "the zone's request reached the server")
        try? FileManager.default.removeItem(atPath: tokenFile)
        try FileManager.default.createDirectory(atPath: tokenFile, withIntermediateDirectories: true)
        _ = try await s.server.admin("faults/clear")
        let (output, timedOut) = await run.wait(within: .seconds(120))
        #expect(!timedOut && output.status == 1, "\(output.stdout)\n\(output.stderr)")
        #expect(output.stdout.contains("upserted"), "the summary is printed: \(output.stdout)")
        #expect(output.stderr.contains("web auth token"), "\(output.stderr)")
        #expect(try MetricsTests.RunRow.last(s).status == "succeeded")
        let metrics = try PrometheusText(parsing: try String(contentsOfFile: metricsFile, encoding: .utf8))
        #expect(metrics.value("zonefeed_run_id", ["pipeline": s.p.name]) == Double(try MetricsTests.RunRow.last(s).runID))
        #expect(metrics.value("zonefeed_run_exit_code", ["pipeline": s.p.name]) == 1)
        #expect(metrics.value("zonefeed_run_status", ["pipeline": s.p.name, "status": "failed"]) == 1, "no success is said")
        #expect(metrics.value("zonefeed_run_last_success_timestamp_seconds", ["pipeline": s.p.name]) == nil)
    }

    @Test func withoutATokenFileTheTokenIsKeptInTheDefaultOneAndTheNextRunStarts() async throws {
        let s = try await Setup("defaulttoken", fake: FakeSettings(seed: 69, zones: 3, recordsPerZone: 600)) { $0.webAuthTokenFile = nil }
        defer { s.stop() }
        var z = s.zonefeed
        z.environment.merge(s.p.environment) { _, new in new }
        let validate = try await z.run(["validate", s.file])
        #expect(validate.stdout.contains("webAuthTokenFile .zonefeed/\(s.p.name).web-auth-token (the default for this pipeline)"), "\(validate.stdout)")

        let first = try await s.run()
        #expect(first.status == 0, "\(first.stderr)")
        let file = s.zonefeed.directory.appendingPathComponent(".zonefeed/\(s.p.name).web-auth-token").path
        #expect(try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? Int == 0o600)
        try await s.addTag("SECOND-RUN", to: "Zone02")
        let second = try await s.run()
        #expect(second.status == 0, "the configured token was retired by the first run: \(second.stderr)")
        #expect(try await s.hasRow("SECOND-RUN", in: "Zone02"))
    }

    /// Retired on issue, a token carried by three requests at once is refused to the third: the
    /// first two were answered with newer ones. Which answer CloudKit gives such a token is not
    /// documented: 401 `AUTHENTICATION_FAILED`, or 421 `AUTHENTICATION_REQUIRED`, which before
    /// stopped the run for a person to sign in again.
    @Test(arguments: [401, 421])
    func aTokenOvertakenByConcurrentRequestsIsRetriedWithTheNewestAndRequestsGoOneAtATime(_ answer: Int) async throws {
        let s = try await Setup(
            "overtaken", fake: FakeSettings(seed: 71, zones: 8, recordsPerZone: 1_000),
            server: ["--token-window", "2", "--token-retirement", "issue", "--latency", "40,10"])
        defer { s.stop() }
        try await s.server.admin("auth/stale-token-answer", ["status": answer])
        let first = try await s.run()
        #expect(first.status == 0, "\(first.stderr)")
        #expect(first.stderr.contains("requests go one at a time"), "\(first.stderr)")
        #expect(try await s.server.traffic()["staleTokenRefusals", default: 0] > 0, "the server did refuse overtaken tokens")
        #expect(try s.tokenFileLines().contains("requests=one-at-a-time"))
        #expect(try await s.liveDifferences() == [])

        try await s.server.admin("stats/reset")
        try await s.addTag("LATER", to: "Zone03")
        let second = try await s.run()
        #expect(second.status == 0, "\(second.stderr)")
        let traffic = try await s.server.traffic()
        #expect(traffic["peakInFlight"] == 1, "the next run knew to send one request at a time: \(traffic)")
        #expect(traffic["staleTokenRefusals"] == 0)
    }

    /// Apple: "every response carries a new token, and the previous one becomes invalid". A
    /// server that holds to it, a window of one token retired on use, with requests in flight
    /// together: the run ends with every zone equal to the source, and the next one too. (The
    /// tests above use a window of two; a window of one was tried only against the server.)
    @Test func aServerThatAcceptsOnlyTheNewestTokenIsSurvived() async throws {
        let s = try await Setup(
            "newestonly", fake: FakeSettings(seed: 75, zones: 6, recordsPerZone: 600), server: ["--token-window", "1", "--latency", "30,10"])
        defer { s.stop() }
        let first = try await s.run()
        #expect(first.status == 0, "\(first.stderr.suffix(2_000))")
        #expect(try await s.liveDifferences() == [])
        let traffic = try await s.server.traffic()
        // Whether a request carries a token retired meanwhile is the scheduler's to say; that
        // requests carrying one token were in flight together is the test's.
        #expect(traffic["overlapped", default: 0] > 0, "requests overlapped: \(traffic)")
        try await s.addTag("LATER", to: "Zone04")
        let second = try await s.run()
        #expect(second.status == 0, "\(second.stderr.suffix(2_000))")
        #expect(try await s.hasRow("LATER", in: "Zone04"))
    }

    @Test func zonesAreFetchedWithManyRequestsInFlightAndEachEqualsTheSource() async throws {
        // A window wide enough for the requests in flight, and 50 ms of latency.
        let s = try await Setup(
            "inflight", fake: FakeSettings(seed: 73, zones: 8, recordsPerZone: 1_000),
            server: ["--token-window", "64", "--latency", "50,10"]
        ) { $0.maxConcurrentRequests = 8 }
        defer { s.stop() }
        let output = try await s.run()
        #expect(output.status == 0, "\(output.stderr)")
        let traffic = try await s.server.traffic()
        #expect(traffic["peakInFlight", default: 0] > 1, "\(traffic)")
        #expect(traffic["overlapped", default: 0] * 2 > traffic["requests", default: 0], "most requests overlapped another: \(traffic)")
        #expect(traffic["staleTokenRefusals"] == 0)
        #expect(try await s.liveDifferences() == [])
    }

    /// Over plain HTTP/1.1, and over TLS where the eight requests are streams of one HTTP/2
    /// connection: the server's limit is met either way. A throttle pauses the others only when
    /// none of them succeeded meanwhile, which the answers' jitter decides; what the run waited,
    /// if anything, is what it reports.
    @Test(arguments: [false, true])
    func aServerThatThrottlesPastTwoRequestsInFlightGetsAboutTwo(overTLS: Bool) async throws {
        let s = try await Setup(
            overTLS ? "inflightcaptls" : "inflightcap", fake: FakeSettings(seed: 75, zones: 8, recordsPerZone: 800),
            server: ["--token-window", "64", "--latency", "20,5", "--max-in-flight", "2"] + (overTLS ? FakeServerProcess.tls : [])
        ) {
            $0.maxConcurrentRequests = 8
            // Eight zones at a server that takes two: on CI, every suite at once on two cores, a
            // request waited out the tests' 30 s retry budget for its turn and the run failed.
            $0.retryBudgetSeconds = 120
        }
        defer { s.stop() }
        let output = try await s.run()
        #expect(output.status == 0, "\(output.stderr)")
        let traffic = try await s.server.traffic()
        #expect(traffic["throttled", default: 0] > 0, "\(traffic)")
        // Eight requests in flight at first; after the throttle the client comes down to the
        // server's two and probes one above it now and then.
        #expect(traffic["peakInFlightAfterThrottle", default: 99] <= 4, "the client came down to the server's limit: \(traffic)")
        let waited = try throttledSeconds(s)
        #expect(output.stdout.contains("waiting because CloudKit asked to slow down") == (waited > 0), "\(waited) s: \(output.stdout)")
        try await expectStatusShows(waited, s)
        #expect(try await s.liveDifferences() == [])
    }
}
