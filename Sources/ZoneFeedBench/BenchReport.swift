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
            "  " + label.padding(toLength: 31, withPad: " ", startingAt: 0)
                + String(format: "%7.2f s user + %5.2f s system", userSeconds, systemSeconds)
                + "   " + Int(recordsPerCPUSecond.rounded()).grouped + " records per CPU-second"
                + String(format: " (%.1f µs a record)", microsecondsPerRecord)
                + (jsonMBPerCPUSecond.map { String(format: ", %.1f MB of JSON per CPU-second", $0) } ?? "")
        }
    }

    /// Each timed run's CPU, in the order they ran.
    var cpu: [CPUUse] = []
    var inProcessSeconds = 0.0
    var inProcessPeakRSSBytes = 0
    var httpSeconds = 0.0
    var httpPeakRSSBytes = 0
    /// What the server spent a row, and the machine's idle share, during each run, when the
    /// server runs on this machine: a ratio to the ceiling is about the server's share of the CPU
    /// when its work a row is the ceiling's.
    var inProcessServer: ServerCPU.Use?
    var httpServer: ServerCPU.Use?
    var noOpRunSeconds: [Double] = []
    var httpPreparedPages = Bench.PreparedPages()
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

    var inProcessRPS: Double { Double(records) / inProcessSeconds }
    var httpRPS: Double { Double(records) / httpSeconds }
    func wanRPS(_ run: WANRun) -> Double { Double(wanRecords) / run.seconds }
    /// One request at a time: a page of 200 records per round trip.
    var wanBoundRPS: Double { 200 / (Double(wanLatencyMilliseconds) / 1000) }
    var noOpMedianSeconds: Double { noOpRunSeconds.sorted()[noOpRunSeconds.count / 2] }

    public var text: String {
        func rate(_ label: String, rps: Double, seconds: Double, peakRSS: Int?, server: ServerCPU.Use? = nil) -> String {
            var line =
                label.padding(toLength: 33, withPad: " ", startingAt: 0)
                + leftPadded(Int(rps.rounded()).grouped, 9) + " records/s"
                + leftPadded(String(format: "%.2fx", rps / ceilingRPS), 8)
                + leftPadded(Self.seconds(seconds), 9)
            if let peakRSS { line += "   peak RSS \(Int((Double(peakRSS) / 1_000_000).rounded()).grouped) MB" }
            if let server { line += "   " + server.text(rows: records) }
            return line
        }
        let ceilingLines = ceilings.map { c in
            rate(
                "ceiling (COPY, \(c.sessions) session\(c.sessions == 1 ? "" : "s"))\(c.afterTheRuns ? ", again" : "")", rps: c.rowsPerSecond,
                seconds: c.seconds, peakRSS: nil)
                + String(format: "   %.0f bytes/row, %.1f MB/s", c.bytesPerRow, c.megabytesPerSecond)
                + (c.server.map { "   " + $0.text(rows: c.rows) } ?? "")
        }
        let wan = wanRuns.map { run in
            "over a WAN (\(wanLatencyMilliseconds) ms, \(wanZones) zones)".padding(toLength: 33, withPad: " ", startingAt: 0)
                + leftPadded(Int(wanRPS(run).rounded()).grouped, 9) + " records/s"
                + leftPadded(String(format: "%.1fx", wanRPS(run) / wanBoundRPS), 8) + " the one-request bound (\(Int(wanBoundRPS).grouped)/s)"
                + "   \(Self.seconds(run.seconds))   peak RSS \(Int((Double(run.peakRSSBytes) / 1_000_000).rounded()).grouped) MB"
                + "   \(run.transport), \(run.connections) TCP connection\(run.connections == 1 ? "" : "s")"
        }
        let header = [
            "zonefeed bench: \(records.grouped) records, \(zones) zones (\(parallelZones) at once), PostgreSQL \(postgresVersion)",
            "ratios are to the fastest ceiling (measured before the runs, and again after the one over HTTP); COPY writes "
                + "\(ceilingRowsPerTransaction.grouped) rows a transaction",
        ]
        return
            (header + ceilingLines + [
                rate("in-process run", rps: inProcessRPS, seconds: inProcessSeconds, peakRSS: inProcessPeakRSSBytes, server: inProcessServer),
                rate("over HTTP (fake-server)", rps: httpRPS, seconds: httpSeconds, peakRSS: httpPeakRSSBytes, server: httpServer),
            ] + wan + (publicRun?.lines ?? []) + (scaleOut?.lines ?? []) + [
                "incremental no-op run".padding(toLength: 33, withPad: " ", startingAt: 0)
                    + "\(Self.seconds(noOpMedianSeconds)) wall (median of \(noOpRunSeconds.map { String(format: "%.2f", $0) }.joined(separator: ", ")))"
            ]
            + (largestPeak.map { peak in
                [
                    "peak RSS of the \(runPeaks.count) timed runs".padding(toLength: 33, withPad: " ", startingAt: 0)
                        + "\(Self.megabytes(peak.bytes)) MB at most (\(peak.label))"
                ]
            } ?? []) + (cpu.isEmpty ? [] : ["CPU of each run (the whole zonefeed process; the server and PostgreSQL not counted):"] + cpu.map(\.line)))
            .joined(separator: "\n")
    }

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
            var object: [String: JSONValue] = [
                "records": .int(Int64(records)),
                "zones": .int(Int64(zones)),
                "parallel_zones": .int(Int64(parallelZones)),
                // Whether every page of the HTTP run was rendered before its clock started
                // (`--prepare-pages`), as the fake server counted them.
                "http_pages_prepared": .bool(httpPreparedPages.servedAll),
                "http_prepared_pages": .int(Int64(httpPreparedPages.prepared)),
                "http_prepared_pages_served": .int(Int64(httpPreparedPages.served)),
                "postgres_version": .string(postgresVersion),
                "ceiling_rows_per_transaction": .int(Int64(ceilingRowsPerTransaction)),
                "ceiling_rps": .int(Int64(ceilingRPS.rounded())),
                "ceiling_seconds": rounded(ceiling.seconds),
                "ceiling_sessions": .int(Int64(ceiling.sessions)),
                "ceiling_bytes_per_row": rounded(ceiling.bytesPerRow),
                "ceiling_mb_per_second": rounded(ceiling.megabytesPerSecond),
                "ceilings": .array(
                    ceilings.map { c in
                        var figures: [String: JSONValue] = [
                            "sessions": .int(Int64(c.sessions)), "rps": .int(Int64(c.rowsPerSecond.rounded())),
                            "seconds": rounded(c.seconds), "bytes_per_row": rounded(c.bytesPerRow), "mb_per_second": rounded(c.megabytesPerSecond),
                            "after_the_runs": .bool(c.afterTheRuns),
                        ]
                        if let server = c.server {
                            figures["server_us_per_row"] = rounded(server.microsecondsPerRow(c.rows))
                            figures["idle_share"] = rounded(server.idleShare)
                        }
                        return .object(figures)
                    }),
                "wan_records": .int(Int64(wanRecords)),
                "wan_zones": .int(Int64(wanZones)),
                "wan_latency_ms": .int(Int64(wanLatencyMilliseconds)),
                "wan_bound_rps": .int(Int64(wanBoundRPS.rounded())),
                "inprocess_rps": .int(Int64(inProcessRPS.rounded())),
                "inprocess_ratio": rounded(inProcessRPS / ceilingRPS),
                "inprocess_seconds": rounded(inProcessSeconds),
                "inprocess_peak_rss_bytes": .int(Int64(inProcessPeakRSSBytes)),
                "http_rps": .int(Int64(httpRPS.rounded())),
                "http_ratio": rounded(httpRPS / ceilingRPS),
                "http_seconds": rounded(httpSeconds),
                "http_peak_rss_bytes": .int(Int64(httpPeakRSSBytes)),
                "noop_run_seconds": rounded(noOpMedianSeconds),
                "noop_run_seconds_all": .array(noOpRunSeconds.map(rounded)),
            ]
            if let largestPeak {
                object["peak_rss_bytes_max"] = .int(Int64(largestPeak.bytes))
                object["peak_rss_bytes_runs"] = .array(
                    runPeaks.map { .object(["run": .string($0.label), "bytes": .int(Int64($0.bytes))]) })
            }
            for (key, server) in [("inprocess", inProcessServer), ("http", httpServer)] {
                guard let server else { continue }
                object["\(key)_server_us_per_row"] = rounded(server.microsecondsPerRow(records))
                object["\(key)_idle_share"] = rounded(server.idleShare)
            }
            if let server = ceiling.server {
                object["ceiling_server_us_per_row"] = rounded(server.microsecondsPerRow(ceiling.rows))
                object["ceiling_idle_share"] = rounded(server.idleShare)
            }
            if let publicRun { object.merge(publicRun.json) { _, new in new } }
            if let scaleOut { object.merge(scaleOut.json) { _, new in new } }
            for use in cpu {
                object["\(use.key)_cpu_user_seconds"] = rounded(use.userSeconds)
                object["\(use.key)_cpu_system_seconds"] = rounded(use.systemSeconds)
                object["\(use.key)_records_per_cpu_second"] = .int(Int64(use.recordsPerCPUSecond.rounded()))
                if let mb = use.jsonMBPerCPUSecond { object["\(use.key)_json_mb_per_cpu_second"] = rounded(mb) }
            }
            for run in wanRuns {
                object["\(run.key)_rps"] = .int(Int64(wanRPS(run).rounded()))
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
