import Foundation
import Testing
import TestSupport

/// The benchmark's figures are never asserted (they depend on the machine); what it must do is
/// run every phase on the records it was given and report them in the keys the README names.
@Suite struct BenchCommandTests {
    @Test func aSmallBenchRunsEveryPhaseAndWritesItsFigures() throws {
        let zonefeed = try ZonefeedBinary()
        defer { zonefeed.remove() }
        let json = zonefeed.directory.appendingPathComponent("bench.json").path
        let output = try zonefeed.run([
            "bench", "--records", "1200", "--zones", "3", "--parallel-zones", "3", "--database-url", try TestDatabase.connectionString(), "--json", json,
        ])
        #expect(output.status == 0, "\(output.stderr)")
        for phase in ["ceiling", "in-process run", "over HTTP", "incremental no-op run"] {
            #expect(output.stdout.contains(phase), "the table has a line for \(phase): \(output.stdout)")
        }

        let figures = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: json))) as? [String: Any] ?? [:]
        #expect(figures["records"] as? Int == 1200)
        #expect(figures["parallel_zones"] as? Int == 3)
        #expect(output.stdout.contains("3 zones (3 at once)"))
        #expect(figures["http_pages_prepared"] as? Bool == true, "the JSON says the HTTP run was timed against prepared pages")
        for key in ["ceiling_rps", "inprocess_rps", "http_rps", "noop_run_seconds", "inprocess_peak_rss_bytes", "http_peak_rss_bytes"] {
            let value = (figures[key] as? NSNumber)?.doubleValue ?? 0
            #expect(value > 0, "\(key) is a positive figure, not \(String(describing: figures[key]))")
        }
    }
}
