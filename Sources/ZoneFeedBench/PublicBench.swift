import CloudKitWebServices
import FakeCloudKit
import Foundation
import LibPQ
import NIOPosix
import ZoneFeed

/// The public database's phase of `zonefeed bench`: one record type read by query from a fake
/// server `--wan-latency` ms away, signed with a server-to-server key. What one request at a time
/// could fetch is a page of 200 records a round trip; the first backfill slices the type's
/// modification times and reads the slices at once. Then a run with nothing new (its requests
/// counted at the server), and a run that sweeps for deletions (its requests per 100,000
/// records).
struct PublicBench: Sendable {
    let bench: Bench
    /// Records in the public database; about seven in ten are Notes, the type read.
    let records: Int
    let latencyMilliseconds: Int

    struct Report: Sendable {
        var records = 0
        var latencyMilliseconds = 0
        var backfillSeconds = 0.0
        var backfillPeakRSSBytes = 0
        var backfillRequests = 0
        var backfillPeakInFlight = 0
        var noOpRequests = 0
        var noOpSeconds = 0.0
        var sweepRequests = 0
        var sweepSeconds = 0.0
        var backfillCPU: BenchReport.CPUUse?

        /// A page of 200 records a round trip.
        var boundRPS: Double { 200 / (Double(latencyMilliseconds) / 1000) }
        var backfillRPS: Double { Double(records) / backfillSeconds }
        /// What a sweep asks per 100,000 records (the run's pass over the lag is in it too).
        var sweepRequestsPer100k: Double { Double(sweepRequests) * 100_000 / Double(max(1, records)) }

        var lines: [String] {
            func number(_ text: String) -> String { String(repeating: " ", count: max(0, 9 - text.count)) + text }
            return [
                BenchReport.label("public database (\(latencyMilliseconds) ms, 1 type)") + number(BenchReport.grouped(backfillRPS)) + " records/s"
                    + String(format: "   %.1fx the one-request bound (%@/s)", backfillRPS / boundRPS, Int(boundRPS).grouped)
                    + "   \(BenchReport.seconds(backfillSeconds))   peak RSS \(Int((Double(backfillPeakRSSBytes) / 1_000_000).rounded()).grouped) MB"
                    + "   \(records.grouped) records, \(backfillRequests.grouped) requests, \(backfillPeakInFlight) at once",
                BenchReport.label("  run with nothing new") + number("\(noOpRequests)") + " requests for 1 record type   \(BenchReport.seconds(noOpSeconds))",
                BenchReport.label("  deletion sweep") + number(String(format: "%.0f", sweepRequestsPer100k)) + " requests per 100,000 records"
                    + "   \(sweepRequests.grouped) requests in all   \(BenchReport.seconds(sweepSeconds))",
            ]
        }

        var json: [String: JSONValue] {
            func rounded(_ value: Double) -> JSONValue { .double((value * 1000).rounded() / 1000) }
            return [
                "public_records": .int(Int64(records)),
                "public_latency_ms": .int(Int64(latencyMilliseconds)),
                "public_bound_rps": BenchReport.jsonWhole(boundRPS),
                "public_backfill_rps": BenchReport.jsonWhole(backfillRPS),
                "public_backfill_ratio_to_bound": rounded(backfillRPS / boundRPS),
                "public_backfill_seconds": rounded(backfillSeconds),
                "public_backfill_peak_rss_bytes": .int(Int64(backfillPeakRSSBytes)),
                "public_backfill_requests": .int(Int64(backfillRequests)),
                "public_backfill_peak_in_flight": .int(Int64(backfillPeakInFlight)),
                "public_noop_requests_per_type": .int(Int64(noOpRequests)),
                "public_noop_seconds": rounded(noOpSeconds),
                "public_sweep_requests": .int(Int64(sweepRequests)),
                "public_sweep_requests_per_100k": rounded(sweepRequestsPer100k),
                "public_sweep_seconds": rounded(sweepSeconds),
            ]
        }
    }

    /// The generator's settings for the public database, as the fake server makes it.
    var settings: FakeSettings { FakeSettings(seed: 44, zones: 1, recordsPerZone: records, pageSize: 200, churn: false) }

    func measure() async throws -> Report {
        try bench.checkNotInterrupted()
        let notes = FakeFeed(settings: settings).entrySummaries(zone: 0, range: 0..<records).filter { $0.recordType == "Note" }.count
        var report = Report(records: notes, latencyMilliseconds: latencyMilliseconds)

        // A key of the bench's own: its private half for the pipeline, its public half for the
        // server.
        let key = ServerKey.generate()
        let privateFile = bench.path("bench-public-key.pem")
        let publicFile = bench.path("bench-public-key.pub.pem")
        try? FileManager.default.removeItem(atPath: privateFile)
        guard FileManager.default.createFile(atPath: privateFile, contents: Data(key.privateKeyPEM.utf8), attributes: [.posixPermissions: 0o600]),
            FileManager.default.createFile(atPath: publicFile, contents: Data(key.publicKeyPEM.utf8))
        else { throw Bench.Failure("could not write the bench's server key files in \(bench.work)") }

        bench.progress("public database: starting zonefeed fake-server with \(records.grouped) public records, \(latencyMilliseconds) ms away…")
        let arguments = [
            "--zones", "1", "--records-per-zone", "1", "--seed", "\(settings.seed)", "--no-churn", "--public-records", "\(records)",
            "--latency", "\(latencyMilliseconds),\(max(1, latencyMilliseconds / 5))", "--server-key", "bench=\(publicFile)",
        ]
        try await bench.withFakeServer(name: "public", arguments: arguments, records: records) { server in
            let pipeline = try writePipeline(server, privateFile: privateFile, sweep: "never")
            try bench.dropSchema(pipeline)

            bench.progress("public database: a first backfill of \(notes.grouped) Notes, read by query in slices…")
            try await server.resetTraffic()
            let backfill = try await NIOThreadPool.singleton.runIfActive {
                try bench.runPipeline(pipeline, label: "the public database's backfill", logName: "public-backfill")
            }
            try bench.checkLiveRows(pipeline, label: "the public database's backfill", logName: "public-backfill", expected: notes)
            report.backfillSeconds = backfill.seconds
            report.backfillPeakRSSBytes = backfill.peakRSSBytes
            report.backfillRequests = try await server.trafficCount("requests")
            report.backfillPeakInFlight = try await server.trafficCount("peakInFlight")
            report.backfillCPU = BenchReport.CPUUse(
                label: "public database backfill", key: "public_backfill", records: notes, run: backfill,
                jsonBytes: try await server.trafficCount("bodyBytes"))

            bench.progress("public database: a run with nothing new…")
            try await server.resetTraffic()
            let noOp = try await NIOThreadPool.singleton.runIfActive {
                try bench.runPipeline(pipeline, label: "the public database's run with nothing new", logName: "public-noop")
            }
            report.noOpSeconds = noOp.seconds
            report.noOpRequests = try await server.trafficCount("requests")

            bench.progress("public database: a run that sweeps for deletions…")
            let sweeping = try writePipeline(server, privateFile: privateFile, sweep: "every 1 runs")
            try await server.resetTraffic()
            let sweep = try await NIOThreadPool.singleton.runIfActive {
                try bench.runPipeline(sweeping, label: "the public database's sweep", logName: "public-sweep")
            }
            try bench.checkLiveRows(sweeping, label: "the public database's sweep", logName: "public-sweep", expected: notes)
            report.sweepSeconds = sweep.seconds
            report.sweepRequests = try await server.trafficCount("requests")
            if !bench.options.keep { try bench.dropSchema(pipeline) }
        }
        return report
    }

    /// `bench-public`, reading the Notes of the fake server's public database with the bench's
    /// key, with the pipeline's defaults otherwise (16 requests in flight, 5,000 records a
    /// transaction).
    func writePipeline(_ server: BenchServer, privateFile: String, sweep: String) throws -> Pipeline {
        try bench.writePipeline(
            "bench-public", schema: "bench_public", defaults: true, mapping: Bench.noteMapping,
            source: """
                  cloudkit:
                    baseURL: \(bench.yamlString(server.baseURL))
                    container: iCloud.com.example.fake
                    environment: development
                    database: public
                    deletionSweep: \(sweep)
                    auth:
                      serverKey:
                        keyID: bench
                        privateKeyFile: \(bench.yamlString(privateFile))
                """)
    }
}
