import CloudKitModel
import FakeCloudKit
import Foundation
import NIOPosix
import ZoneFeed

/// The scale-out phase of `zonefeed bench`: one pipeline of many zones, `--wan-latency` ms away,
/// run first by one process, then by several identical ones at once (as a Kubernetes Job with
/// `parallelism` runs them), which share the zones through PostgreSQL's locks. Each process is
/// held to a few requests in flight (`maxConcurrentRequests`), as CloudKit's throttling holds a
/// client: more processes help where one process waits on round trips, not where it is short of
/// CPU (on this machine's two cores, one process at the default 16 requests already is).
struct ScaleOutBench: Sendable {
    let bench: Bench
    let processes: Int
    let zones: Int
    let recordsPerZone: Int
    let latencyMilliseconds: Int
    /// Requests each process has in flight.
    static let requestsInFlight = 2

    struct Report: Sendable {
        var processes = 0
        var zones = 0
        var records = 0
        var latencyMilliseconds = 0
        var oneSeconds = 0.0
        var manySeconds = 0.0
        var manyPeakRSSBytes = 0
        /// Records read and committed, summed over the zones (each process's batches add theirs).
        var recordsCommitted = 0

        var oneRPS: Double { Double(records) / oneSeconds }
        var manyRPS: Double { Double(records) / manySeconds }

        var lines: [String] {
            func number(_ value: Double) -> String {
                let text = BenchReport.grouped(value)
                return String(repeating: " ", count: max(0, 9 - text.count)) + text
            }
            let setting = "\(zones) zones, \(latencyMilliseconds) ms, \(ScaleOutBench.requestsInFlight) requests in flight a process"
            return [
                BenchReport.label("scale-out, 1 process") + number(oneRPS) + " records/s   \(BenchReport.seconds(oneSeconds))   \(setting)",
                BenchReport.label("scale-out, \(processes) processes") + number(manyRPS) + " records/s"
                    + String(format: "   %.2fx one process", manyRPS / oneRPS) + "   \(BenchReport.seconds(manySeconds))"
                    + "   peak RSS \(Int((Double(manyPeakRSSBytes) / 1_000_000).rounded()).grouped) MB a process"
                    + "   \(recordsCommitted.grouped) records read and committed for \(records.grouped)",
            ]
        }

        var json: [String: JSONValue] {
            func rounded(_ value: Double) -> JSONValue { .double((value * 1000).rounded() / 1000) }
            return [
                "scaleout_processes": .int(Int64(processes)),
                "scaleout_zones": .int(Int64(zones)),
                "scaleout_records": .int(Int64(records)),
                "scaleout_latency_ms": .int(Int64(latencyMilliseconds)),
                "scaleout_requests_in_flight": .int(Int64(ScaleOutBench.requestsInFlight)),
                "scaleout_one_rps": BenchReport.jsonWhole(oneRPS),
                "scaleout_one_seconds": rounded(oneSeconds),
                "scaleout_many_rps": BenchReport.jsonWhole(manyRPS),
                "scaleout_many_seconds": rounded(manySeconds),
                "scaleout_ratio": rounded(manyRPS / oneRPS),
                "scaleout_many_peak_rss_bytes": .int(Int64(manyPeakRSSBytes)),
                "scaleout_records_committed": .int(Int64(recordsCommitted)),
            ]
        }
    }

    func measure() async throws -> Report {
        try bench.checkNotInterrupted()
        let settings = FakeSettings(seed: 45, zones: zones, recordsPerZone: recordsPerZone, pageSize: 200, churn: false)
        let records = zones * recordsPerZone
        var report = Report(processes: processes, zones: zones, records: records, latencyMilliseconds: latencyMilliseconds)
        let arguments = [
            "--zones", "\(zones)", "--records-per-zone", "\(recordsPerZone)", "--seed", "\(settings.seed)", "--page-size", "200", "--no-churn",
            "--prepare-pages", "--latency", "\(latencyMilliseconds),\(max(1, latencyMilliseconds / 5))",
        ]
        bench.progress("scale-out: starting zonefeed fake-server with \(zones) zones, \(latencyMilliseconds) ms away…")
        try await bench.withFakeServer(name: "scaleout", arguments: arguments, records: records) { server in
            let pipeline = try bench.writePipeline(
                "bench-scaleout", schema: "bench_scaleout", defaults: true,
                source: bench.fakeServerSource(server, name: "scaleout") + "\n    maxConcurrentRequests: \(Self.requestsInFlight)")

            try bench.dropSchema(pipeline)
            bench.progress("scale-out: one process, \(records.grouped) records in \(zones) zones…")
            let one = try await NIOThreadPool.singleton.runIfActive {
                try bench.runPipeline(pipeline, label: "the scale-out phase's one process", logName: "scaleout-one")
            }
            try bench.checkLiveRows(pipeline, label: "the scale-out phase's one process", logName: "scaleout-one", expected: records)
            report.oneSeconds = one.seconds

            try bench.dropSchema(pipeline)
            bench.progress("scale-out: \(processes) processes at once on the same pipeline…")
            let many = try await NIOThreadPool.singleton.runIfActive {
                try bench.runPipelines(pipeline, count: processes, label: "the scale-out phase's processes", logName: { "scaleout-many-\($0)" })
            }
            try bench.checkLiveRows(pipeline, label: "the scale-out phase's processes", logName: "scaleout-many-0", expected: records)
            report.manySeconds = many.seconds
            report.manyPeakRSSBytes = many.peakRSSBytes
            report.recordsCommitted = try bench.recordsCommitted(of: pipeline)
            guard report.recordsCommitted == records else {
                throw Bench.Failure(
                    "the \(processes) processes read and committed \(report.recordsCommitted.grouped) records for \(records.grouped): a zone was applied twice, "
                        + "so the figures mean nothing; their logs are scaleout-many-*.stderr in \(bench.work)")
            }
            if !bench.options.keep { try bench.dropSchema(pipeline) }
        }
        return report
    }
}
