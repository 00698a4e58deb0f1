import CloudKitModel
import Foundation
import ZoneFeed

/// The bench's figures, as text for a person and as JSON for a machine.
public struct BenchReport: Sendable {
    var records: Int
    var zones: Int
    var parallelZones = 1
    var postgresVersion: String
    var ceilingRowsPerTransaction = 0
    /// The field sets a zone the notes of the ceilings and the two backfills take their fields
    /// from (`FakeSettings.fieldSets`); nil when every note drew its own.
    var fieldSets: Int?
    /// At one session and at the runs' `parallelZones`.
    var ceilings: [CopyCeiling.Measurement] = []
    /// The fastest ceiling: the one the ratios are to.
    var ceiling: CopyCeiling.Measurement { ceilings.max { $0.rowsPerSecond < $1.rowsPerSecond }! }
    var ceilingRPS: Double { ceiling.rowsPerSecond }
    var wanRecords = 0
    var wanZones = 0
    var wanLatencyMilliseconds = 0
    /// Plain HTTP/1.1 first, then TLS with HTTP/2: the same zones, records and latency.
    var wanRuns: [WANRun] = []

    /// One run of the WAN phase.
    struct WANRun: Sendable {
        /// "HTTP/1.1" or "TLS + HTTP/2".
        var transport: String
        /// The key prefix in the JSON: `wan` or `wan_tls`.
        var key: String
        var seconds: Double
        var peakRSSBytes: Int
        /// TCP connections that carried CloudKit requests, as the fake server counted them.
        var connections: Int
        var cpu: CPUUse
    }

    /// What a run cost in CPU: its user and system seconds (wait4's rusage, the whole process),
    /// per record, and per byte of the JSON it read when it read it over HTTP.
    struct CPUUse: Sendable {
        var label: String
        /// The key prefix in the JSON: `inprocess`, `http`, `wan`, `wan_tls`, `public_backfill`.
        var key: String
        var records: Int
        var userSeconds: Double
        var systemSeconds: Double
        /// The bodies of the server's answers; nil for the in-process run, which reads no JSON.
        var jsonBytes: Int?

        init(label: String, key: String, records: Int, run: Bench.ProcessRun, jsonBytes: Int?) {
            self.label = label
            self.key = key
            self.records = records
            userSeconds = run.userSeconds
            systemSeconds = run.systemSeconds
            self.jsonBytes = jsonBytes
        }

        var cpuSeconds: Double { max(userSeconds + systemSeconds, 0.001) }
        var recordsPerCPUSecond: Double { Double(records) / cpuSeconds }
        var jsonMBPerCPUSecond: Double? { jsonBytes.map { Double($0) / 1_000_000 / cpuSeconds } }
        var microsecondsPerRecord: Double { cpuSeconds * 1_000_000 / Double(max(records, 1)) }

        var line: String {
            "  " + label.padding(toLength: BenchReport.labelWidth - 2, withPad: " ", startingAt: 0)
                + String(format: "%7.2f s user + %5.2f s system", userSeconds, systemSeconds)
                + "   " + BenchReport.grouped(recordsPerCPUSecond) + " records per CPU-second"
                + String(format: " (%.1f µs a record)", microsecondsPerRecord)
                + (jsonMBPerCPUSecond.map { String(format: ", %.1f MB of JSON per CPU-second", $0) } ?? "")
        }
    }

    /// One round's timed backfill: the in-process run or the one over HTTP.
    struct BackfillRun: Sendable {
        var round: Int
        var run: Bench.ProcessRun
        var cpu: CPUUse
        /// Over HTTP: the pages the fake server rendered beforehand, and how many it served.
        var pages: Bench.PreparedPages? = nil

        var seconds: Double { run.seconds }
        var peakRSSBytes: Int { run.peakRSSBytes }
        /// What the server spent a row, and the machine's idle share, during the run, when the
        /// server runs on this machine: a ratio to the ceiling is about the server's share of
        /// the CPU when its work a row is the ceiling's.
        var server: ServerCPU.Use? { run.server }
    }

    /// The in-process run and the run over HTTP of each round, in order.
    var inProcessRuns: [BackfillRun] = []
    var httpRuns: [BackfillRun] = []
    /// The fastest of each: the runs the figures are of.
    var inProcess: BackfillRun { Self.fastest(inProcessRuns) }
    var http: BackfillRun { Self.fastest(httpRuns) }
    static func fastest(_ runs: [BackfillRun]) -> BackfillRun { runs.min { $0.seconds < $1.seconds }! }
    var rounds: Int { inProcessRuns.count }
    /// Each timed run's CPU: the two backfills' fastest rounds, then the others in the order
    /// they ran.
    var cpu: [CPUUse] = []
    var noOpRunSeconds: [Double] = []
    /// Every timed `zonefeed run`'s peak RSS.
    var runPeaks: [PeakRSSLog.Entry] = []
    var largestPeak: PeakRSSLog.Entry? { runPeaks.max { $0.bytes < $1.bytes } }
    /// The public database's phase, when it ran.
    var publicRun: PublicBench.Report?
    var scaleOut: ScaleOutBench.Report?

    init(records: Int, zones: Int, postgresVersion: String) {
        self.records = records
        self.zones = zones
        self.postgresVersion = postgresVersion
    }

    func rps(_ run: BackfillRun) -> Double { run.seconds > 0 ? Double(records) / run.seconds : 0 }
    var inProcessRPS: Double { rps(inProcess) }
    var httpRPS: Double { rps(http) }
    /// Every run over HTTP was timed against pages rendered beforehand, each served once.
    var httpPagesPrepared: Bool { httpRuns.allSatisfy { $0.pages?.servedAll ?? false } }
    /// A run's rate to the ceiling measured in its round, beside it.
    func roundCeilingRatio(_ run: BackfillRun) -> Double? {
        ceilings.first { $0.round == run.round }.map { rps(run) / $0.rowsPerSecond }
    }
    func wanRPS(_ run: WANRun) -> Double { run.seconds > 0 ? Double(wanRecords) / run.seconds : 0 }
    /// One request at a time: a page of 200 records per round trip.
    var wanBoundRPS: Double { 200 / (Double(wanLatencyMilliseconds) / 1000) }
    var noOpMedianSeconds: Double { noOpRunSeconds.sorted()[noOpRunSeconds.count / 2] }

    public var text: String {
        func rate(_ label: String, rps: Double, seconds: Double, peakRSS: Int?, server: ServerCPU.Use? = nil) -> String {
            var line =
                Self.label(label)
                + leftPadded(Self.grouped(rps), 9) + " records/s"
                + leftPadded(String(format: "%.2fx", rps / ceilingRPS), 8)
                + leftPadded(Self.seconds(seconds), 9)
            if let peakRSS { line += "   peak RSS \(Int((Double(peakRSS) / 1_000_000).rounded()).grouped) MB" }
            if let server { line += "   " + server.text(rows: records) }
            return line
        }
        let ceilingLines = ceilings.map { c in
            rate(
                "ceiling (COPY, \(c.sessions) session\(c.sessions == 1 ? "" : "s"))\(c.round.map { rounds > 1 ? ", round \($0)" : "" } ?? "")",
                rps: c.rowsPerSecond,
                seconds: c.seconds, peakRSS: nil)
                + String(format: "   %.0f bytes/row, %.1f MB/s", c.bytesPerRow, c.megabytesPerSecond)
                + (c.server.map { "   " + $0.text(rows: c.rows) } ?? "")
        }
        let wan = wanRuns.map { run in
            Self.label("over a WAN (\(wanLatencyMilliseconds) ms, \(wanZones) zones)")
                + leftPadded(Self.grouped(wanRPS(run)), 9) + " records/s"
                + leftPadded(String(format: "%.1fx", wanRPS(run) / wanBoundRPS), 8) + " the one-request bound (\(Int(wanBoundRPS).grouped)/s)"
                + "   \(Self.seconds(run.seconds))   peak RSS \(Int((Double(run.peakRSSBytes) / 1_000_000).rounded()).grouped) MB"
                + "   \(run.transport), \(run.connections) TCP connection\(run.connections == 1 ? "" : "s")"
        }
        let header = [
            "zonefeed bench: \(records.grouped) records, \(zones) zones (\(parallelZones) at once), PostgreSQL \(postgresVersion)",
            "ratios are to the fastest ceiling"
                + (rounds > 1
                    ? "; the ceiling and the two runs were measured in \(rounds) rounds, one after the other, and each run's line is its fastest round's"
                    : "")
                + "; COPY writes \(ceilingRowsPerTransaction.grouped) rows a transaction"
                + (fieldSets.map { "; notes take their fields from \($0.grouped) sets a zone, written once" } ?? ""),
        ]
        func backfill(_ label: String, _ runs: [BackfillRun]) -> [String] {
            let fastest = Self.fastest(runs)
            var lines = [rate(label, rps: rps(fastest), seconds: fastest.seconds, peakRSS: fastest.peakRSSBytes, server: fastest.server)]
            if runs.count > 1 {
                lines.append(
                    Self.label("  each round")
                        + runs.map { run in
                            String(format: "%.2fx", rps(run) / ceilingRPS)
                                + (roundCeilingRatio(run).map { String(format: " (%.2fx its round's ceiling)", $0) } ?? "")
                        }.joined(separator: ", "))
            }
            return lines
        }
        return
            (header + ceilingLines + backfill("in-process run", inProcessRuns) + backfill("over HTTP (fake-server)", httpRuns) + wan + (publicRun?.lines ?? [])
            + (scaleOut?.lines ?? []) + [
                Self.label("incremental no-op run")
                    + "\(Self.seconds(noOpMedianSeconds)) wall (median of \(noOpRunSeconds.map { String(format: "%.2f", $0) }.joined(separator: ", ")))"
            ]
            + (largestPeak.map { peak in
                [
                    Self.label("peak RSS of the \(runPeaks.count) timed runs")
                        + "\(Self.megabytes(peak.bytes)) MB at most (\(peak.label))"
                ]
            } ?? []) + (cpu.isEmpty ? [] : ["CPU of each run (the whole zonefeed process; the server and PostgreSQL not counted):"] + cpu.map(\.line)))
            .joined(separator: "\n")
    }

    /// A rate as a whole number, when it is one an Int holds: a rate over a time the clock
    /// measured as next to nothing is not.
    static func whole(_ value: Double) -> Int? {
        guard value.isFinite, abs(value) < 9e18 else { return nil }
        return Int(value.rounded())
    }

    /// A rate, whole and grouped ("123,456"), or "?" where it is not a number an Int holds.
    static func grouped(_ value: Double) -> String { whole(value)?.grouped ?? "?" }

    /// A rate as a JSON integer, or null where it is not a number an Int holds.
    static func jsonWhole(_ value: Double) -> JSONValue { whole(value).map { .int(Int64($0)) } ?? .null }

    /// The width of the labels the figures of each line stand after: the longest,
    /// "ceiling (COPY, 16 sessions), round 10" (37 characters), and two spaces.
    static let labelWidth = 39

    /// `text` padded to the labels' width.
    static func label(_ text: String) -> String { text.padding(toLength: labelWidth, withPad: " ", startingAt: 0) }

    /// Bytes in whole megabytes (10^6), rounded, grouped: integer arithmetic, which no count of
    /// bytes can overflow.
    static func megabytes(_ bytes: Int) -> String { (bytes / 1_000_000 + (bytes % 1_000_000 >= 500_000 ? 1 : 0)).grouped }

    /// "12.5 s", with a second decimal under ten seconds.
    static func seconds(_ value: Double) -> String {
        String(format: value < 10 ? "%.2f s" : "%.1f s", value)
    }

    func leftPadded(_ text: String, _ width: Int) -> String {
        String(repeating: " ", count: max(0, width - text.count)) + text
    }

    /// The figures as a JSON object with snake_case keys: rates in whole records per second,
    /// times to the millisecond, ratios to the ceiling's rate.
    public var jsonData: Data {
        get throws {
            func rounded(_ value: Double) -> JSONValue { .double((value * 1000).rounded() / 1000) }
            /// `server_us_per_row` and `idle_share` with `prefix`, when the server's CPU was read.
            func serverFigures(_ server: ServerCPU.Use?, rows: Int, prefix: String = "", into figures: inout [String: JSONValue]) {
                guard let server else { return }
                figures[prefix + "server_us_per_row"] = rounded(server.microsecondsPerRow(rows))
                figures[prefix + "idle_share"] = rounded(server.idleShare)
            }
            var object: [String: JSONValue] = [
                "records": .int(Int64(records)),
                "zones": .int(Int64(zones)),
                "parallel_zones": .int(Int64(parallelZones)),
                // Whether every page of every run over HTTP was rendered before its clock
                // started (`--prepare-pages`), as the fake server counted them; the counts are
                // the fastest round's.
                "http_pages_prepared": .bool(httpPagesPrepared),
                "http_prepared_pages": .int(Int64(http.pages?.prepared ?? 0)),
                "http_prepared_pages_served": .int(Int64(http.pages?.served ?? 0)),
                "rounds": .int(Int64(rounds)),
                "postgres_version": .string(postgresVersion),
                "ceiling_rows_per_transaction": .int(Int64(ceilingRowsPerTransaction)),
                "field_sets": fieldSets.map { .int(Int64($0)) } ?? .null,
                "ceiling_rps": Self.jsonWhole(ceilingRPS),
                "ceiling_seconds": rounded(ceiling.seconds),
                "ceiling_sessions": .int(Int64(ceiling.sessions)),
                "ceiling_bytes_per_row": rounded(ceiling.bytesPerRow),
                "ceiling_mb_per_second": rounded(ceiling.megabytesPerSecond),
                "ceilings": .array(
                    ceilings.map { c in
                        var figures: [String: JSONValue] = [
                            "sessions": .int(Int64(c.sessions)), "rps": Self.jsonWhole(c.rowsPerSecond),
                            "seconds": rounded(c.seconds), "bytes_per_row": rounded(c.bytesPerRow), "mb_per_second": rounded(c.megabytesPerSecond),
                        ]
                        if let round = c.round { figures["round"] = .int(Int64(round)) }
                        serverFigures(c.server, rows: c.rows, into: &figures)
                        return .object(figures)
                    }),
                "wan_records": .int(Int64(wanRecords)),
                "wan_zones": .int(Int64(wanZones)),
                "wan_latency_ms": .int(Int64(wanLatencyMilliseconds)),
                "wan_bound_rps": Self.jsonWhole(wanBoundRPS),
                "inprocess_rps": Self.jsonWhole(inProcessRPS),
                "inprocess_ratio": rounded(inProcessRPS / ceilingRPS),
                "inprocess_seconds": rounded(inProcess.seconds),
                "inprocess_peak_rss_bytes": .int(Int64(inProcess.peakRSSBytes)),
                "http_rps": Self.jsonWhole(httpRPS),
                "http_ratio": rounded(httpRPS / ceilingRPS),
                "http_seconds": rounded(http.seconds),
                "http_peak_rss_bytes": .int(Int64(http.peakRSSBytes)),
                "noop_run_seconds": rounded(noOpMedianSeconds),
                "noop_run_seconds_all": .array(noOpRunSeconds.map(rounded)),
            ]
            if let largestPeak {
                object["peak_rss_bytes_max"] = .int(Int64(largestPeak.bytes))
                object["peak_rss_bytes_runs"] = .array(
                    runPeaks.map { .object(["run": .string($0.label), "bytes": .int(Int64($0.bytes))]) })
            }
            for (key, runs) in [("inprocess", inProcessRuns), ("http", httpRuns)] {
                serverFigures(Self.fastest(runs).server, rows: records, prefix: "\(key)_", into: &object)
                object["\(key)_rounds"] = .array(
                    runs.map { run in
                        var figures: [String: JSONValue] = [
                            "round": .int(Int64(run.round)), "rps": Self.jsonWhole(rps(run)), "seconds": rounded(run.seconds),
                            "ratio": rounded(rps(run) / ceilingRPS), "peak_rss_bytes": .int(Int64(run.peakRSSBytes)),
                            "records_per_cpu_second": Self.jsonWhole(run.cpu.recordsPerCPUSecond),
                        ]
                        if let ratio = roundCeilingRatio(run) { figures["ratio_to_round_ceiling"] = rounded(ratio) }
                        serverFigures(run.server, rows: records, into: &figures)
                        return .object(figures)
                    })
            }
            serverFigures(ceiling.server, rows: ceiling.rows, prefix: "ceiling_", into: &object)
            if let publicRun { object.merge(publicRun.json) { _, new in new } }
            if let scaleOut { object.merge(scaleOut.json) { _, new in new } }
            for use in cpu {
                object["\(use.key)_cpu_user_seconds"] = rounded(use.userSeconds)
                object["\(use.key)_cpu_system_seconds"] = rounded(use.systemSeconds)
                object["\(use.key)_records_per_cpu_second"] = Self.jsonWhole(use.recordsPerCPUSecond)
                if let mb = use.jsonMBPerCPUSecond { object["\(use.key)_json_mb_per_cpu_second"] = rounded(mb) }
            }
            for run in wanRuns {
                object["\(run.key)_rps"] = Self.jsonWhole(wanRPS(run))
                object["\(run.key)_ratio_to_bound"] = rounded(wanRPS(run) / wanBoundRPS)
                object["\(run.key)_seconds"] = rounded(run.seconds)
                object["\(run.key)_peak_rss_bytes"] = .int(Int64(run.peakRSSBytes))
                object["\(run.key)_connections"] = .int(Int64(run.connections))
            }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            return try encoder.encode(JSONValue.object(object)) + Data("\n".utf8)
        }
    }
}
