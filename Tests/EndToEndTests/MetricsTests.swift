import FakeCloudKit
import Foundation
import LibPQ
import TestSupport
import Testing

/// `zonefeed run --metrics-file` and `--pushgateway`: Prometheus' two ways for batch jobs, seen
/// as a monitoring system sees them.
@Suite struct MetricsTests {
    /// The run's row in zonefeed_runs, as the metrics must repeat it.
    struct RunRow: Equatable {
        var runID, pages, upserts, tombstones, rejects, skipped: Int
        var status: String

        static func last(_ s: CloudKitEndToEndTests.Setup) throws -> RunRow {
            try Connection.withConnection(s.p.url) { c in
                let row = try c.query(
                    "SELECT run_id, pages, upserts, tombstones, rejects, skipped, status FROM \(quoteIdentifier(s.p.schema)).zonefeed_runs WHERE pipeline = $1 ORDER BY run_id DESC LIMIT 1",
                    [s.p.name]
                ).rows[0]
                return RunRow(
                    runID: try row.decode(0), pages: try row.decode(1), upserts: try row.decode(2), tombstones: try row.decode(3),
                    rejects: try row.decode(4), skipped: try row.decode(5), status: try row.decode(6))
            }
        }

        /// The same numbers, as the metrics say them.
        static func from(_ metrics: PrometheusText, _ labels: [String: String]) -> RunRow? {
            func count(_ name: String, _ more: [String: String] = [:]) -> Int? {
                metrics.value(name, labels.merging(more) { _, new in new }).map { Int($0) }
            }
            let statuses = ["succeeded", "failed", "interrupted", "refused"].filter { count("zonefeed_run_status", ["status": $0]) == 1 }
            guard let runID = count("zonefeed_run_id"), let pages = count("zonefeed_pages_total"),
                let upserts = count("zonefeed_records_total", ["outcome": "upserted"]),
                let tombstones = count("zonefeed_records_total", ["outcome": "tombstoned"]),
                let rejects = count("zonefeed_records_total", ["outcome": "rejected"]),
                let skipped = count("zonefeed_records_total", ["outcome": "skipped"]), statuses.count == 1
            else { return nil }
            return RunRow(runID: runID, pages: pages, upserts: upserts, tombstones: tombstones, rejects: rejects, skipped: skipped, status: statuses[0])
        }
    }

    @Test func theMetricsFileIsPrometheusTextThatMatchesTheRunAndAFailureLeavesTheLastSuccess() async throws {
        let s = try await CloudKitEndToEndTests.Setup("metricsfile", fake: FakeSettings(seed: 81, zones: 3, recordsPerZone: 900))
        defer { s.stop() }
        let path = s.zonefeed.directory.appendingPathComponent("textfile/zonefeed.prom").path
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)

        let first = try await s.run(["--metrics-file", path])
        #expect(first.status == 0, "\(first.stderr)")
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let metrics = try PrometheusText(parsing: text)
        let labels = ["pipeline": s.p.name]
        let row = try RunRow.last(s)
        #expect(row.upserts > 0)
        #expect(RunRow.from(metrics, labels) == row, "\(text)")
        // Every metric has its HELP and TYPE; every series carries the pipeline.
        #expect(Set(metrics.samples.map(\.name)).allSatisfy { metrics.help[$0] != nil && metrics.types[$0] != nil })
        #expect(metrics.samples.allSatisfy { $0.labels["pipeline"] == s.p.name })
        #expect((metrics.value("zonefeed_cloudkit_requests_total", ["status": "200"]) ?? 0) >= Double(row.pages))
        #expect(metrics.value("zonefeed_run_exit_code", labels) == 0)
        let lastSuccess = try #require(metrics.value("zonefeed_run_last_success_timestamp_seconds", labels))
        #expect(abs(lastSuccess - Date().timeIntervalSince1970) < 120)
        #expect(!text.contains(s.p.webAuthToken), "no secret in the metrics")
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(mode == 0o644, "the collector, another user, reads it")

        // The account changed: the run fails (exit 3, for a person) and the file says so,
        // keeping the last success.
        try await s.server.admin("user", ["userRecordName": "_someoneElse"])
        let second = try await s.run(["--metrics-file", path])
        #expect(second.status == 3, "\(second.stderr)")
        let failed = try PrometheusText(parsing: try String(contentsOfFile: path, encoding: .utf8))
        #expect(RunRow.from(failed, labels) == (try RunRow.last(s)))
        #expect(failed.value("zonefeed_run_status", labels.merging(["status": "failed"]) { _, new in new }) == 1)
        #expect(failed.value("zonefeed_run_exit_code", labels) == 3)
        #expect(failed.value("zonefeed_run_last_success_timestamp_seconds", labels) == lastSuccess)
        #expect(failed.value("zonefeed_run_finished_timestamp_seconds", labels)! > lastSuccess)
    }

    /// A database that cannot be reached is a run that never started: `refused`, as the docs
    /// define it and as watch says it, where it was `failed` with run id 0.
    @Test func aRunThatCannotReachItsDatabaseIsRefusedInTheMetrics() async throws {
        let s = try await CloudKitEndToEndTests.Setup("metricsrefused", fake: FakeSettings(seed: 86, zones: 1, recordsPerZone: 10))
        defer { s.stop() }
        let path = s.zonefeed.directory.appendingPathComponent("refused.prom").path
        var z = s.zonefeed
        z.environment.merge(s.p.environment) { _, new in new }
        z.environment["ZONEFEED_TEST_URL"] = "postgresql://zonefeed@127.0.0.1:\(try TestPushgateway.freeLoopbackPort())/nothing"
        let run = try await z.run(["run", s.file, "--progress", "never", "--metrics-file", path])
        #expect(run.status == 1, "\(run.stderr)")
        let metrics = try PrometheusText(parsing: try String(contentsOfFile: path, encoding: .utf8))
        let labels = ["pipeline": s.p.name]
        #expect(metrics.value("zonefeed_run_status", labels.merging(["status": "refused"]) { $1 }) == 1, "\(run.stderr)")
        #expect(metrics.value("zonefeed_run_status", labels.merging(["status": "failed"]) { $1 }) == 0)
        #expect(metrics.value("zonefeed_run_exit_code", labels) == 1)
    }

    @Test func aPushgatewayShowsEachRunAndOnlyASuccessMovesTheLastSuccess() async throws {
        let gateway = try await TestPushgateway()
        defer { gateway.stop() }
        let s = try await CloudKitEndToEndTests.Setup("metricspush", fake: FakeSettings(seed: 83, zones: 2, recordsPerZone: 700))
        defer { s.stop() }
        let group = ["job": "zonefeed", "pipeline": s.p.name]

        let first = try await s.run(["--pushgateway", gateway.url])
        #expect(first.status == 0, "\(first.stderr)")
        let afterSuccess = try PrometheusText(parsing: try await gateway.metrics())
        let firstRow = try RunRow.last(s)
        #expect(RunRow.from(afterSuccess, group) == firstRow)
        let lastSuccess = try #require(afterSuccess.value("zonefeed_run_last_success_timestamp_seconds", group))
        #expect(afterSuccess.value("push_failure_time_seconds", group) == 0, "the gateway took the push")

        try await s.server.admin("user", ["userRecordName": "_someoneElse"])
        let second = try await s.run(["--pushgateway", gateway.url])
        #expect(second.status == 3, "\(second.stderr)")
        let afterFailure = try PrometheusText(parsing: try await gateway.metrics())
        let secondRow = try RunRow.last(s)
        #expect(secondRow.runID == firstRow.runID + 1 && secondRow.status == "failed")
        #expect(RunRow.from(afterFailure, group) == secondRow, "the gateway shows the failed run's own counters")
        #expect(afterFailure.value("zonefeed_run_exit_code", group) == 3)
        #expect(afterFailure.value("zonefeed_run_last_success_timestamp_seconds", group) == lastSuccess, "a failure does not move it")

        // A gateway that is not there is an error in the log, not a different exit code.
        try await s.server.admin("user", ["userRecordName": "_fakeUser"])
        let unreachable = try await s.run(["--pushgateway", "http://127.0.0.1:9"])
        #expect(unreachable.status == 0, "\(unreachable.stderr)")
        #expect(unreachable.stderr.contains("the Pushgateway at http://127.0.0.1:9 cannot be reached"), "\(unreachable.stderr)")
    }

    /// A gateway behind Basic authentication is named with its user and password in the URL:
    /// the push carries them, and says neither. Before, AsyncHTTPClient sent nothing of the URL's
    /// user part, and every push was refused with a 401. An instance (or pipeline) named `..` gets
    /// its own group too, where the gateway refused the push of such a path (HTTP 400).
    @Test func aPushgatewayBehindAPasswordTakesThePushAndThePasswordIsNotSaid() async throws {
        let user = TestPushgateway.User.operations
        let gateway = try await TestPushgateway(requiring: user)
        defer { gateway.stop() }
        let s = try await CloudKitEndToEndTests.Setup("metricsauth", fake: FakeSettings(seed: 85, zones: 1, recordsPerZone: 200))
        defer { s.stop() }
        let withUser = gateway.url.replacingOccurrences(of: "://", with: "://" + user.inURL)

        let pushed = try await s.run(["--pushgateway", withUser])
        #expect(pushed.status == 0, "\(pushed.stderr)")
        #expect(!pushed.stderr.contains("Pushgateway"), "\(pushed.stderr)")
        let metrics = try PrometheusText(parsing: try await gateway.metrics())
        #expect(RunRow.from(metrics, ["job": "zonefeed", "pipeline": s.p.name]) == (try RunRow.last(s)))

        let refused = try await s.run(["--pushgateway", gateway.url.replacingOccurrences(of: "://", with: "://ops:wrong@")])
        #expect(refused.status == 0, "a push refused is said, not the run's exit code: \(refused.stderr)")
        #expect(refused.stderr.contains("the Pushgateway at \(gateway.url) refused the metrics: HTTP 401"), "\(refused.stderr)")
        for output in [pushed.stdout, pushed.stderr, refused.stdout, refused.stderr] {
            #expect(!output.contains(user.password) && !output.contains("s3cr") && !output.contains("wrong"), "\(output)")
        }

        let dots = try await s.run(["--pushgateway", withUser, "--metrics-instance", ".."])
        #expect(dots.status == 0 && !dots.stderr.contains("Pushgateway"), "\(dots.stderr)")
        let afterDots = try PrometheusText(parsing: try await gateway.metrics())
        #expect(afterDots.value("zonefeed_run_id", ["job": "zonefeed", "pipeline": s.p.name, "instance": ".."]) == Double(try RunRow.last(s).runID))
    }

    /// A gateway (or a proxy before it) that answers a push's head and never its body costs the
    /// push a bounded wait, not the run: the data is in and the exit code stands. A 2xx head is
    /// the gateway's word that it took the metrics; any other is a refusal, said in the log.
    /// Before, the run waited for the body for good.
    @Test(arguments: [200, 503]) func aPushgatewayThatNeverFinishesItsAnswerDoesNotHoldTheRun(status: Int) async throws {
        let stalled = try await HeadOnlyServer(status: status)
        defer { stalled.stop() }
        let s = try await CloudKitEndToEndTests.Setup("metricsstall\(status)", fake: FakeSettings(seed: 84, zones: 1, recordsPerZone: 300))
        defer { s.stop() }
        var z = s.zonefeed
        z.environment.merge(s.p.environment) { _, new in new }
        let started = ContinuousClock.now
        let (run, timedOut) = try await z.start(["run", s.file, "--progress", "never", "--pushgateway", stalled.url]).wait(within: .seconds(120))
        let took = ContinuousClock.now - started
        #expect(!timedOut, "the run still waited for the gateway after 120 s")
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try RunRow.last(s).status == "succeeded")
        let pushes = stalled.requestsAnswered
        #expect(pushes.count == 1 && pushes.allSatisfy { $0.hasPrefix("POST /metrics/job/zonefeed/") }, "one push was answered: \(pushes)")
        if status == 200 {
            #expect(!run.stderr.contains("Pushgateway"), "\(run.stderr)")
        } else {
            #expect(run.stderr.contains("the Pushgateway at \(stalled.url) refused the metrics: HTTP 503"), "\(run.stderr)")
        }
        #expect(took < .seconds(60), "the body's 10 s and the run's own: \(took)")
    }

    /// Two processes of one pipeline, each with its own instance label (a Job's pods, docs/scale-out.md):
    /// the gateway keeps both groups, each with the zones that process claimed, where one group
    /// would hold only the process that pushed last (here the second, which had nothing to do).
    @Test func processesWithTheirOwnInstanceKeepAGroupEachAtThePushgateway() async throws {
        let gateway = try await TestPushgateway()
        defer { gateway.stop() }
        let s = try await CloudKitEndToEndTests.Setup("metricsinstances", fake: FakeSettings(seed: 84, zones: 3, recordsPerZone: 300))
        defer { s.stop() }
        let first = try await s.run(["--pushgateway", gateway.url, "--metrics-instance", "pod-a"])
        let second = try await s.run(["--pushgateway", gateway.url, "--metrics-instance", "pod-b"])
        #expect(first.status == 0 && second.status == 0, "\(first.stderr) \(second.stderr)")
        let text = try PrometheusText(parsing: try await gateway.metrics())
        let a = ["job": "zonefeed", "pipeline": s.p.name, "instance": "pod-a"]
        let b = ["job": "zonefeed", "pipeline": s.p.name, "instance": "pod-b"]
        #expect(text.value("zonefeed_zones_claimed", a) == 3, "the first run claimed and applied the three zones")
        #expect(text.value("zonefeed_zones_total", a.merging(["outcome": "applied"]) { $1 }) == 3)
        #expect(text.value("zonefeed_zones_claimed", b) == 0, "the second found no zone changed (changes/database), and claimed none")
        #expect(text.value("zonefeed_zones_total", b.merging(["outcome": "applied"]) { $1 }) == 0)
        #expect(text.value("zonefeed_run_id", a) != text.value("zonefeed_run_id", b), "each group is its own process's")
        let empty = try await s.run(["--pushgateway", gateway.url, "--metrics-instance", ""])
        #expect(empty.status == 2 && empty.stderr.contains("--metrics-instance is empty"), "\(empty.stderr)")
    }
}
