import AsyncHTTPClient
import CloudKitModel
import FakeCloudKit
import Foundation
import LibPQ
import NIOCore
import ZoneFeed
import ZoneFeedPostgres

/// `zonefeed bench --watch`: how long a change takes from the source to a row in PostgreSQL
/// under `zonefeed watch`. A fake server (`--token-window 2`, `--latency` as asked) and a watcher
/// on it; changes are added through the admin endpoint at random intervals, and for each the time
/// from the admin call's answer to the row being visible is measured by polling PostgreSQL every
/// 5 ms. Then the same with the notifications dropped: every change must still arrive within one
/// poll interval (the safety net).
public struct WatchBench: Sendable {
    public struct Options: Sendable {
        public var changes: Int
        public var droppedChanges: Int
        public var pollIntervalSeconds: Int
        public var latencyMilliseconds: Int

        public init(changes: Int = 200, droppedChanges: Int = 10, pollIntervalSeconds: Int = 5, latencyMilliseconds: Int = 20) {
            self.changes = changes
            self.droppedChanges = droppedChanges
            self.pollIntervalSeconds = pollIntervalSeconds
            self.latencyMilliseconds = latencyMilliseconds
        }
    }

    /// Latencies in seconds, in the order the changes were made.
    public struct Report: Sendable {
        public var pushed: [Double] = []
        public var dropped: [Double] = []
        public var pollIntervalSeconds = 0
        public var latencyMilliseconds = 0

        static func percentile(_ values: [Double], _ p: Double) -> Double {
            let sorted = values.sorted()
            guard !sorted.isEmpty else { return .nan }
            return sorted[min(sorted.count - 1, Int((p / 100 * Double(sorted.count)).rounded(.up)) - 1)]
        }

        public var text: String {
            func line(_ label: String, _ values: [Double]) -> String {
                let ms = { (p: Double) in String(format: "%.0f ms", Self.percentile(values, p) * 1000) }
                return "\(label) (\(values.count) changes): p50 \(ms(50)), p95 \(ms(95)), p99 \(ms(99)), max \(ms(100))"
            }
            return [
                "zonefeed bench --watch: from the admin call to the row in PostgreSQL, a fake server \(latencyMilliseconds) ms away (2-token window)",
                line("  with notifications   ", pushed),
                line("  notifications dropped", dropped) + " (safety poll every \(pollIntervalSeconds) s)",
            ].joined(separator: "\n")
        }
    }

    let bench: Bench
    let options: Options

    public init(bench: Bench, options: Options) {
        self.bench = bench
        self.options = options
    }

    public func measure() async throws -> Report {
        let settings = FakeSettings(seed: 43, zones: 2, recordsPerZone: 500, pageSize: 200, churn: false)
        let arguments = [
            "--zones", "\(settings.zones)", "--records-per-zone", "\(settings.recordsPerZone)", "--seed", "\(settings.seed)", "--no-churn",
            "--token-window", "2", "--latency", "\(options.latencyMilliseconds),\(options.latencyMilliseconds / 5)",
        ]
        return try await bench.withFakeServer(name: "watch", arguments: arguments, records: 1_000) { server in
            try await measure(against: server, initialRecords: settings.zones * settings.recordsPerZone)
        }
    }

    func measure(against server: BenchServer, initialRecords: Int) async throws -> Report {
        let baseURL = server.baseURL
        let pipeline = try bench.writePipeline(
            "bench-watch", schema: "bench_watch",
            source: bench.fakeServerSource(server, name: "watch"))
        try bench.dropSchema(pipeline)
        let watcher = try ChildProcess(
            name: "zonefeed watch", executable: ChildProcess.currentExecutable,
            arguments: ["watch", pipeline.filePath, "--poll-interval", "\(options.pollIntervalSeconds)"],
            environment: bench.environment, stdout: .file(bench.path("watch.stdout")), stderr: .file(bench.path("watch.stderr")))
        let admin = AdminClient(baseURL: baseURL)
        let rows = try Connection(bench.conninfo)
        defer { rows.close() }
        do {
            let report = try await measure(pipeline: pipeline, admin: admin, rows: rows, initialRecords: initialRecords)
            kill(watcher.pid, SIGTERM)
            watcher.wait()
            await admin.shutdown()
            return report
        } catch {
            kill(watcher.pid, SIGTERM)
            watcher.wait()
            await admin.shutdown()
            throw error
        }
    }

    func measure(pipeline: Pipeline, admin: AdminClient, rows: Connection, initialRecords: Int) async throws -> Report {
        let table = "\(quoteIdentifier((try pipeline.postgresSettings()).schema)).\(quoteIdentifier("tags"))"

        bench.progress("watch: catching up with \(initialRecords.grouped) records, then subscribing…")
        let notes = "\(quoteIdentifier((try pipeline.postgresSettings()).schema)).\(quoteIdentifier("notes"))"
        try await waitUntil(seconds: 120, "the watcher to catch up and listen") {
            let caughtUp = ((try? rows.query("SELECT count(*) FROM \(notes)").scalar(as: Int64.self)) ?? 0) > 0
            return caughtUp ? try await admin.isListening() : false
        }
        try await Task.sleep(for: .seconds(1))  // the cycle that follows the push token's registration

        var report = Report(pollIntervalSeconds: options.pollIntervalSeconds, latencyMilliseconds: options.latencyMilliseconds)
        bench.progress("watch: \(options.changes) changes at random intervals, with notifications…")
        for i in 0..<options.changes {
            try bench.checkNotInterrupted()
            try await Task.sleep(for: .milliseconds(Int.random(in: 50...400)))
            report.pushed.append(try await timeChange(named: "PUSHED-\(i)", zone: i % 2 == 0 ? "Zone01" : "Zone02", admin: admin, rows: rows, table: table))
        }
        try await admin.post("notifications", ["drop": .bool(true)])
        bench.progress("watch: \(options.droppedChanges) changes with notifications dropped (safety poll every \(options.pollIntervalSeconds) s)…")
        for i in 0..<options.droppedChanges {
            try bench.checkNotInterrupted()
            try await Task.sleep(for: .milliseconds(Int.random(in: 50...400)))
            report.dropped.append(try await timeChange(named: "DROPPED-\(i)", zone: "Zone01", admin: admin, rows: rows, table: table))
        }
        return report
    }

    /// Adds a Tag record and returns the seconds until its row is visible.
    func timeChange(named name: String, zone: String, admin: AdminClient, rows: Connection, table: String) async throws -> Double {
        let record = JSONValue.object(["recordName": .string(name), "recordType": .string("Tag"), "fields": .object([:])])
        try await admin.post("records/add", ["zone": .string(zone), "records": .array([record])])
        let start = ContinuousClock.now
        let deadline = start + .seconds(Double(options.pollIntervalSeconds) * 3 + 30)
        while ContinuousClock.now < deadline {
            if try rows.query("SELECT 1 FROM \(table) WHERE record_name = $1", [name]).rows.count == 1 {
                return (ContinuousClock.now - start).seconds
            }
            try await Task.sleep(for: .milliseconds(5))
        }
        throw Bench.Failure("\(name) never reached PostgreSQL under zonefeed watch" + bench.stderrTail("watch"))
    }

    func waitUntil(seconds: Int, _ what: String, _ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while ContinuousClock.now < deadline {
            try bench.checkNotInterrupted()
            if (try? await condition()) == true { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw Bench.Failure("timed out waiting for \(what)" + bench.stderrTail("watch"))
    }
}

/// The fake server's admin endpoints.
struct AdminClient: Sendable {
    let baseURL: String
    let client = HTTPClient(eventLoopGroupProvider: .singleton)

    func post(_ operation: String, _ body: [String: JSONValue]) async throws {
        _ = try await call(operation, body)
    }

    func isListening() async throws -> Bool {
        try await call("state", [:]).contains("\"registeredTokens\":1")
    }

    func call(_ operation: String, _ body: [String: JSONValue]) async throws -> String {
        var request = HTTPClientRequest(url: "\(baseURL)/admin/\(operation)")
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(string: JSONValue.object(body).jsonText))
        let response = try await client.execute(request, timeout: .seconds(30))
        let text = String(buffer: try await response.body.collect(upTo: 1 << 20))
        guard response.status.code == 200 else { throw Bench.Failure("admin \(operation) answered \(response.status.code): \(text)") }
        return text
    }

    func shutdown() async {
        try? await client.shutdown()
    }
}
