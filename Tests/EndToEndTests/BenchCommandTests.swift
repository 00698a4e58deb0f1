import Foundation
import TestSupport
import Testing

/// The benchmark's figures are never asserted (they depend on the machine); what it must do is
/// run every phase on the records it was given and report them in the keys the README names.
@Suite struct BenchCommandTests {
    @Test func aSmallBenchRunsEveryPhaseAndWritesItsFigures() async throws {
        let zonefeed = try ZonefeedBinary()
        defer { zonefeed.remove() }
        let json = zonefeed.directory.appendingPathComponent("bench.json").path
        let output = try await zonefeed.run([
            "bench", "--records", "1200", "--zones", "3", "--parallel-zones", "3", "--wan-records", "3200", "--wan-zones", "8",
            "--wan-latency", "40", "--public-records", "3000", "--scale-out-records", "6400", "--database-url", try await TestDatabase.connectionString(),
            "--rounds", "2", "--json", json,
        ])
        #expect(output.status == 0, "\(output.stderr)")
        for phase in [
            "ceiling (COPY, 1 session)", "ceiling (COPY, 3 sessions)", "in-process run", "over HTTP", "over a WAN (40 ms, 8 zones)", "incremental no-op run",
            "public database (40 ms, 1 type)", "run with nothing new", "deletion sweep", "CPU of each run", "records per CPU-second",
            "MB of JSON per CPU-second", "scale-out, 1 process", "scale-out, 4 processes",
        ] {
            #expect(output.stdout.contains(phase), "the table has a line for \(phase): \(output.stdout)")
        }

        let figures = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: json))) as? [String: Any] ?? [:]
        #expect(figures["records"] as? Int == 1200)
        #expect(figures["parallel_zones"] as? Int == 3)
        #expect(output.stdout.contains("3 zones (3 at once)"))
        #expect(figures["http_pages_prepared"] as? Bool == true, "the JSON says the HTTP run was timed against prepared pages")
        // The ceilings and both runs write notes of the same field sets, and say so.
        #expect(figures["field_sets"] as? Int == 1_024)
        #expect(output.stdout.contains("notes take their fields from 1,024 sets a zone"), "\(output.stdout)")
        // Counted by the server: 1,200 records in 3 zones, 200 a page, each page served once.
        let prepared = figures["http_prepared_pages"] as? Int ?? 0
        #expect(prepared >= 6 && figures["http_prepared_pages_served"] as? Int == prepared, "\(figures)")
        // Every timed run's peak RSS, not only those a rate is printed beside.
        let peaks = (figures["peak_rss_bytes_runs"] as? [[String: Any]] ?? []).map { ($0["run"] as? String ?? "", $0["bytes"] as? Int ?? 0) }
        for run in ["no-op run 3", "the scale-out phase's one process", "the scale-out phase's processes"] {
            #expect(peaks.contains { $0.0 == run && $0.1 > 0 }, "\(run) in \(peaks)")
        }
        #expect(figures["peak_rss_bytes_max"] as? Int == peaks.map(\.1).max(), "\(peaks)")
        #expect(output.stdout.contains("peak RSS of the \(peaks.count) timed runs"), "\(output.stdout)")
        #expect(figures["wan_latency_ms"] as? Int == 40)
        #expect(figures["wan_bound_rps"] as? Int == 5_000, "200 records a page, one page per 40 ms")
        #expect([1, 3].contains(figures["ceiling_sessions"] as? Int ?? 0))
        // The WAN phase twice: HTTP/1.1 on a connection per request in flight, TLS + HTTP/2 on one.
        #expect(output.stdout.contains("HTTP/1.1, "), "\(output.stdout)")
        #expect(output.stdout.contains("TLS + HTTP/2, 1 TCP connection"), "\(output.stdout)")
        #expect(figures["wan_tls_connections"] as? Int == 1)
        #expect(figures["wan_connections"] as? Int ?? 0 >= 1)
        // At one session once, then at three in each round, beside that round's two runs.
        let ceilings = figures["ceilings"] as? [[String: Any]] ?? []
        #expect(ceilings.map { $0["sessions"] as? Int ?? 0 } == [1, 3, 3])
        #expect(ceilings.map { $0["round"] as? Int } == [nil, 1, 2])
        #expect(output.stdout.contains("ceiling (COPY, 3 sessions), round 2"), "\(output.stdout)")
        #expect(figures["rounds"] as? Int == 2)
        // One fake server for every round's run over HTTP: its pages are rendered once, before
        // the rounds, and each run was served them all.
        #expect(output.stderr.components(separatedBy: "starting zonefeed fake-server, which renders its pages first").count == 2, "\(output.stderr)")
        // The ratios are the fastest round's run to the fastest ceiling, and each round is shown.
        let fastestCeiling = ceilings.map { $0["rps"] as? Int ?? 0 }.max() ?? 0
        #expect(figures["ceiling_rps"] as? Int == fastestCeiling)
        for key in ["inprocess", "http"] {
            let rounds = figures["\(key)_rounds"] as? [[String: Any]] ?? []
            #expect(rounds.map { $0["round"] as? Int ?? 0 } == [1, 2], "\(key): \(rounds)")
            #expect(figures["\(key)_rps"] as? Int == rounds.map { $0["rps"] as? Int ?? 0 }.max(), "\(key): \(rounds)")
            #expect(rounds.allSatisfy { $0["server_us_per_row"] is NSNumber }, "\(key): \(rounds)")
            // Each round's run against the fastest ceiling, and against its own round's.
            for run in rounds {
                let rps = Double(run["rps"] as? Int ?? 0)
                let roundCeiling = Double(ceilings.first { $0["round"] as? Int == run["round"] as? Int }?["rps"] as? Int ?? 0)
                #expect(abs((run["ratio"] as? Double ?? 0) - rps / Double(fastestCeiling)) < 0.002, "\(key): \(run)")
                #expect(abs((run["ratio_to_round_ceiling"] as? Double ?? 0) - rps / roundCeiling) < 0.002, "\(key): \(run)")
            }
        }
        for run in ["the in-process run", "the run over HTTP"] {
            #expect(peaks.contains { $0.0 == "\(run), round 1 of 2" } && peaks.contains { $0.0 == "\(run), round 2 of 2" }, "\(peaks)")
        }
        #expect(output.stdout.components(separatedBy: "\n  each round ").count == 3, "a line of each round's ratios under each run: \(output.stdout)")
        // The tests' server runs on this machine: what it spent a row is read beside each phase
        // (a few milliseconds of it here, which /proc may count as none; `ServerCPUTests` holds
        // the counting).
        #expect(ceilings.allSatisfy { $0["server_us_per_row"] is NSNumber && $0["idle_share"] is NSNumber }, "\(ceilings)")
        for key in ["ceiling", "inprocess", "http"] {
            #expect(figures["\(key)_server_us_per_row"] is NSNumber && figures["\(key)_idle_share"] is NSNumber, "\(key)")
        }
        for line in output.stdout.split(separator: "\n") where line.hasPrefix("ceiling (") || line.hasPrefix("in-process run") {
            #expect(line.contains(" µs a row, ") && line.contains("% of the machine idle"), "\(line)")
        }
        // The public database's phase reads the Notes of 3,000 records (about seven in ten).
        let notes = figures["public_records"] as? Int ?? 0
        #expect((1_800...2_400).contains(notes), "\(notes)")
        #expect(figures["public_bound_rps"] as? Int == 5_000)
        #expect(figures["public_backfill_peak_in_flight"] as? Int ?? 0 > 1, "the backfill's slices were read at once")
        // The scale-out phase: 64 zones of 100 records, once by one process, once by four.
        #expect(figures["scaleout_records"] as? Int == 6_400 && figures["scaleout_processes"] as? Int == 4)
        #expect(figures["scaleout_records_committed"] as? Int == 6_400, "each record was read and committed once: a zone read twice counts twice")
        for key in [
            "scaleout_one_rps", "scaleout_many_rps", "scaleout_ratio",
            "ceiling_rps", "inprocess_rps", "http_rps", "noop_run_seconds", "inprocess_peak_rss_bytes", "http_peak_rss_bytes",
            "wan_rps", "wan_peak_rss_bytes", "wan_tls_rps", "wan_tls_peak_rss_bytes", "ceiling_bytes_per_row", "ceiling_mb_per_second",
            "public_backfill_rps", "public_backfill_peak_rss_bytes", "public_noop_requests_per_type", "public_sweep_requests_per_100k",
            "inprocess_cpu_user_seconds", "inprocess_records_per_cpu_second", "http_records_per_cpu_second", "http_json_mb_per_cpu_second",
            "wan_records_per_cpu_second", "wan_tls_json_mb_per_cpu_second", "public_backfill_records_per_cpu_second",
        ] {
            let value = (figures[key] as? NSNumber)?.doubleValue ?? 0
            #expect(value > 0, "\(key) is a positive figure, not \(String(describing: figures[key]))")
        }
    }
}
