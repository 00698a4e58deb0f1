import CloudKitModel
import FakeCloudKit
import Foundation
import LibPQ
import TestSupport
import Testing
import ZoneFeed

/// Issue 22, as an attacker-minded user meets the built binary: bad numbers, huge or endless
/// files, passwords in broken connection strings and control characters from a server never
/// crash it, hang it, leak a secret or drive the terminal.
@Suite struct BadInputTests {
    /// A CloudKit pipeline into the embedded database that a run never reaches when the file is
    /// refused; `extra` lines go into `source.cloudkit`.
    static func cloudKitPipeline(_ extra: String) -> String {
        """
        pipeline: bounded
        source:
          cloudkit:
            baseURL: http://127.0.0.1:9
            container: iCloud.com.example.notes
            \(extra)
            auth: { apiToken: t, webAuthToken: w }
        destination:
          url: embedded

        """
    }

    // MARK: Diagnostics

    /// The largest pipeline file zonefeed reads, all unknown keys: fifty lines and a count, in
    /// seconds rather than minutes.
    @Test func aMebibyteOfUnknownKeysIsFiftyLinesAndACount() throws {
        let zonefeed = try ZonefeedBinary()
        defer { zonefeed.remove() }
        var yaml = Self.cloudKitPipeline("")
        var keys = 0
        while yaml.utf8.count < (1 << 20) - 32 {
            keys += 1
            yaml += "key\(keys): 1\n"
        }
        try yaml.write(to: zonefeed.directory.appendingPathComponent("keys.yml"), atomically: true, encoding: .utf8)
        let started = ContinuousClock.now
        let output = try zonefeed.run(["validate", "keys.yml"])
        let elapsed = ContinuousClock.now - started
        #expect(output.status == 2)
        let lines = output.stderr.split(separator: "\n")
        #expect(lines.count == 51)
        #expect(lines.first?.hasPrefix("keys.yml:10:1: unknown key 'key1' at the top level") == true, "\(lines.first ?? "")")
        #expect(lines.last == "… and \((keys - 50).grouped) more problems")
        // About 5 s in a debug build on two busy cores, 2 of them Yams' own; before the edit
        // distances were bounded, 23 to 37 s, and 2,000,000 keys took minutes.
        #expect(elapsed < .seconds(60), "\(elapsed)")
    }

    // MARK: Text from a server

    /// A server's `reason` that holds a newline and a forged log line, a zone whose name clears
    /// the screen and retitles the terminal, a record type and a field with a bell and a C1 CSI:
    /// the text log and `zonefeed status` show them escaped, and no line is forged.
    @Test func textFromAServerReachesTheLogAndStatusEscaped() async throws {
        let forged = "2026-01-01T00:00:00Z info run succeeded run=1"
        let reason = "bad request\n\(forged)\r\u{1b}[2J\u{1b}]0;pwned\u{07}\u{9b}31m"
        let zone = "Evil\u{1b}[2J\u{1b}]0;pwned\u{07}\nZone"
        let s = try await CloudKitEndToEndTests.Setup("inert", fake: FakeSettings(seed: 7, zones: 1, recordsPerZone: 0), server: []) {
            $0.recordTypesSection = "recordTypes: auto\n"
        }
        defer { s.stop() }
        try await s.server.admin("zones/create", ["zone": zone])
        try await s.server.admin(
            "records/add",
            [
                "zone": zone,
                "records": try FakeServerProcess.wire([
                    Record(recordName: "r1", recordType: "Note\u{9b}2J", recordChangeTag: "t1", fields: ["mood\u{07}": .string("calm\u{1b}[2J")])
                ]),
            ])
        // Both zones' first fetch fails (a 400 is not retried), so both are fetched again, and
        // logged, by the next run.
        try await s.server.admin(
            "faults/fail", ["status": 400, "count": 2, "pathSuffix": "records/changes", "serverErrorCode": "BAD_REQUEST", "reason": reason])

        let failed = try s.run(["--log-level", "debug"])
        #expect(failed.status == 1, "\(failed.stderr)")
        let succeeded = try s.run(["--log-level", "debug"])
        #expect(succeeded.status == 0, "\(succeeded.stderr)")
        var z = s.zonefeed
        z.environment.merge(s.p.environment) { _, new in new }
        let status = try z.run(["status", s.file])
        #expect(status.status == 0, "\(status.stderr)")

        for (what, text) in [
            ("the failed run's log", failed.stderr), ("the failed run's summary", failed.stdout), ("the next run's log", succeeded.stderr),
            ("status", status.stdout),
        ] {
            let raw = text.unicodeScalars.filter { ($0.value < 0x20 && $0 != "\n") || (0x7F...0x9F).contains($0.value) }
            #expect(raw.isEmpty, "\(what) holds raw control characters \(raw.map { String($0.value, radix: 16) }): \(text)")
            #expect(!text.split(separator: "\n").contains { $0.hasPrefix(forged) }, "\(what) holds a forged line: \(text)")
        }
        #expect(
            failed.stderr.contains(#"bad request\u{a}2026-01-01T00:00:00Z info run succeeded run=1\u{d}\u{1b}[2J\u{1b}]0;pwned\u{7}\u{9b}31m"#),
            "\(failed.stderr)")
        #expect(succeeded.stderr.contains(#"Evil\u{1b}[2J\u{1b}]0;pwned\u{7}\u{a}Zone"#), "\(succeeded.stderr)")
        #expect(status.stdout.contains(#"Evil\u{1b}[2J\u{1b}]0;pwned\u{7}\u{a}Zone"#), "the zone, escaped: \(status.stdout)")
        #expect(status.stdout.contains(#"\u{1b}]0;pwned\u{7}\u{9b}31m"#), "the run's error, escaped: \(status.stdout)")
        #expect(status.stdout.contains(#"\u{9b}2"#) && status.stdout.contains(#"mood\u{7}"#), "the record type and field, escaped: \(status.stdout)")
    }
}
