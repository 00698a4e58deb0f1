import FakeCloudKit
import FakeCloudKitServer
import Foundation
import TestSupport
import Testing

/// The real door: the built binary against `zonefeed fake-server --tls`, as strict as the field
/// (two tokens good at a time, 10-30 ms a round trip), over HTTPS with a certificate from a
/// private CA the pipeline is told to trust, negotiating HTTP/2 or HTTP/1.1 by ALPN. The watch
/// and throttling classes run over TLS in `WatchTests` and `CloudKitEndToEndTests`.
@Suite struct TLSTransportTests {
    typealias Setup = CloudKitEndToEndTests.Setup
    static let strictTLS = FakeServerProcess.strict + FakeServerProcess.tls

    /// Over HTTP/2 every request is a stream of one connection; offered HTTP/1.1 alone, the
    /// client opens a connection per request in flight. The tables equal the source either way.
    @Test(arguments: ["2", "1.1"])
    func aBackfillOverTLSEqualsTheSource(http: String) async throws {
        let s = try await Setup(
            http == "2" ? "tlsh2" : "tlsh1", fake: FakeSettings(seed: 201, zones: 3, recordsPerZone: 1_200),
            server: Self.strictTLS + ["--http", http]
        ) { $0.maxConcurrentRequests = 8 }
        defer { s.stop() }
        let output = try await s.run()
        #expect(output.status == 0, "\(output.stderr)")
        #expect(try await s.liveDifferences() == [])
        let traffic = try await s.server.traffic()
        print("TLS backfill offering HTTP \(http): \(traffic)")
        #expect(traffic["peakInFlight", default: 0] > 1, "requests overlapped: \(traffic)")
        if http == "2" {
            #expect(traffic["connections"] == 1, "every request was a stream of one HTTP/2 connection: \(traffic)")
        } else {
            #expect(traffic["connections", default: 0] > 1, "HTTP/1.1 carries one request at a time per connection: \(traffic)")
        }
    }

    /// SIGKILL at random moments of a backfill over TLS and HTTP/2 (ZONEFEED_TLS_KILLS times, 3
    /// unless told, 1 to 10,000), then a run to the end: the rows equal the source and every live record was
    /// upserted once, though the server accepts only the newest two tokens.
    @Test func killedAtRandomMomentsOverTLSTheBackfillResumesAndAppliesEachRecordOnce() async throws {
        let wanted = min(max(ProcessInfo.processInfo.environment["ZONEFEED_TLS_KILLS"].flatMap(Int.init) ?? 3, 1), 10_000)
        let s = try await Setup(
            "tlscrash", fake: FakeSettings(seed: 203, zones: 3, recordsPerZone: max(20_000, wanted * 1_000)), server: Self.strictTLS
        ) { $0.commitEvery = 400 }
        defer { s.stop() }
        var z = s.zonefeed
        z.environment.merge(s.p.environment) { _, new in new }
        var kills = 0
        var applied = 0
        var statuses: [Int32] = []
        while kills < wanted, statuses.count < wanted * 2 + 4 {
            let running = try await z.start(["run", s.file, "--progress", "never"])
            s.p.kill(running, afterProgressBeyond: applied, delay: .microseconds(Int.random(in: 0...250_000)))
            let output = await running.wait()
            let status = output.status
            statuses.append(status)
            if status == SIGKILL { kills += 1 }
            if status != SIGKILL, status != 0 { print("a run of the TLS kill loop exited \(status): \(output.stderr)") }
            try await s.p.waitForSessionsToEnd()
            // What the killed run committed after it was seen: the next run must commit beyond it.
            applied = try await s.p.recordsApplied()
            if status == 0 { break }
        }
        let final = try await s.run()
        #expect(final.status == 0, "\(final.stderr)")
        let traffic = try await s.server.traffic()
        print(
            "killed \(kills) runs of a backfill over TLS + HTTP/2 of \(s.p.fake.zones * s.p.fake.recordsPerZone) entries; final run exit \(final.status); \(traffic)"
        )
        #expect(kills >= min(wanted, 3), "runs were killed before they finished; exit statuses in turn: \(statuses)")
        #expect(traffic["connections", default: 0] > kills, "every killed run had opened its connection and committed: \(traffic)")
        #expect(try await s.liveDifferences() == [])
        let snapshot = try await DestinationSnapshot.read(s.p)
        #expect(snapshot.runUpserts == s.p.expected().liveCount, "each live record of the snapshot upserted once")
        #expect(!snapshot.runStatuses.contains("running"))
    }

    /// Apple's edge answers 421 with a page of its own on a connection made for another host, to
    /// everything sent on it. The client drops the connection and sends the request once more on
    /// a fresh one: the server saw one 421, not five, and the run completes.
    @Test func aMisdirectedConnectionIsDroppedAndTheRequestSentOnceMoreOnAFreshOne() async throws {
        let s = try await Setup("tls421", fake: FakeSettings(seed: 205, zones: 2, recordsPerZone: 600), server: Self.strictTLS)
        defer { s.stop() }
        try await s.server.admin("faults/misdirect", ["count": 5])
        let metrics = s.zonefeed.directory.appendingPathComponent("metrics.prom").path
        let output = try await s.run(["--metrics-file", metrics])
        #expect(output.status == 0, "\(output.stderr)")
        #expect(try await s.liveDifferences() == [])
        let traffic = try await s.server.traffic()
        #expect(traffic["misdirected"] == 1, "the misdirected connection carried nothing more: \(traffic)")
        #expect(traffic["connections"] == 2, "\(traffic)")
        #expect(output.stderr.contains("421 Misdirected Request; retrying once on a fresh connection"), "\(output.stderr)")
        let text = try String(contentsOfFile: metrics, encoding: .utf8)
        let series = text.split(separator: "\n").first { $0.hasPrefix("zonefeed_cloudkit_misdirected_retries_total") }
        #expect(series?.hasSuffix(" 1") == true, "\(text)")
    }

    /// A second 421 without CloudKit's body, on the fresh connection, is not a sign-in: exit 1
    /// with a sentence about the network path. A 421 with `AUTHENTICATION_REQUIRED` for every
    /// token the run holds is: exit 3 (each is tried first, as one may have been overtaken).
    @Test func a421IsASignInOnlyWithCloudKitsBody() async throws {
        let s = try await Setup("tls421b", fake: FakeSettings(seed: 207, zones: 1, recordsPerZone: 100), server: Self.strictTLS)
        defer { s.stop() }
        try await s.server.admin("faults/garbage", ["status": 421, "count": 2])
        let misdirected = try await s.run()
        #expect(misdirected.status == 1, "\(misdirected.stderr)")
        #expect(misdirected.stderr.contains("421 Misdirected Request on a fresh connection too"), "\(misdirected.stderr)")
        #expect(!misdirected.stderr.contains("sign in"), "\(misdirected.stderr)")

        try await s.server.admin(
            "faults/fail", ["status": 421, "count": 50, "serverErrorCode": "AUTHENTICATION_REQUIRED", "reason": "sign in again"])
        let signIn = try await s.run()
        #expect(signIn.status == 3, "\(signIn.stderr)")
        #expect(signIn.stderr.contains("AUTHENTICATION_REQUIRED"), "\(signIn.stderr)")
        #expect(!signIn.stderr.contains("retrying once on a fresh connection"), "\(signIn.stderr)")
    }

    /// Without the CA the server's certificate does not verify: the run stops at once with a
    /// sentence naming the host and the cause, exit 1, and no request reached CloudKit.
    @Test func aCertificateThatDoesNotVerifyStopsTheRunAtOnceNamingTheHost() async throws {
        let s = try await Setup("tlsuntrusted", fake: FakeSettings(seed: 209, zones: 2, recordsPerZone: 100), server: Self.strictTLS) {
            $0.moreCloudKit = []
        }
        defer { s.stop() }
        let started = ContinuousClock.now
        let output = try await s.run()
        print("an untrusted certificate failed the run after \(ContinuousClock.now - started)")
        let host = s.server.url.replacingOccurrences(of: "https://", with: "")
        #expect(output.status == 1, "\(output.stderr)")
        #expect(output.stderr.contains("could not make a trusted TLS connection to \(host)"), "\(output.stderr)")
        #expect(output.stderr.contains("CERTIFICATE_VERIFY_FAILED"), "\(output.stderr)")
        #expect(output.stderr.contains("source.cloudkit.tls.caFile"), "\(output.stderr)")
        #expect(!output.stderr.contains("retrying"), "a certificate is not retried: \(output.stderr)")
        #expect(try await s.server.traffic()["requests"] == 0)
    }

    /// A certificate from a trusted CA, but for another host name: refused the same way.
    @Test func aCertificateForAnotherHostNameIsRefused() async throws {
        let identity = try FakeCertificateAuthority.makeIdentity(hosts: ["cloudkit.example.invalid"], loopback: false)
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("zonefeed-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let (cert, key, ca) = (
            folder.appendingPathComponent("server.pem"), folder.appendingPathComponent("server.key"), folder.appendingPathComponent("ca.pem")
        )
        try identity.certificateChainPEM.write(to: cert, atomically: true, encoding: .utf8)
        try identity.privateKeyPEM.write(to: key, atomically: true, encoding: .utf8)
        try (identity.caCertificatePEM ?? "").write(to: ca, atomically: true, encoding: .utf8)

        let s = try await Setup(
            "tlswronghost", fake: FakeSettings(seed: 211, zones: 1, recordsPerZone: 100),
            server: FakeServerProcess.strict + ["--tls", "--tls-cert", cert.path, "--tls-key", key.path]
        ) { $0.moreCloudKit = ["tls:", "  caFile: \(ca.path)"] }
        defer { s.stop() }
        #expect(s.server.caFile == nil, "the server made no CA of its own")
        let output = try await s.run()
        #expect(output.status == 1, "\(output.stderr)")
        #expect(output.stderr.contains("not for this host name"), "\(output.stderr)")
        #expect(!output.stderr.contains("retrying"), "\(output.stderr)")
    }

    /// A server that accepts the connection and never answers the handshake: given up on within
    /// half the request timeout, with a sentence that says so, and not retried.
    @Test func aHandshakeThatNeverEndsIsGivenUpOnAndNotRetried() async throws {
        let silent = try await SilentServer()
        defer { silent.stop() }
        var p = try await FakePipeline(prefix: "tlssilent", fake: FakeSettings(seed: 213, zones: 1, recordsPerZone: 10))
        p.serverURL = "https://127.0.0.1:\(silent.port)"
        p.moreCloudKit = ["timeoutSeconds: 4"]
        let zonefeed = try ZonefeedBinary(environment: p.environment)
        defer { zonefeed.remove() }
        let file = try p.write(to: zonefeed.directory)
        let started = ContinuousClock.now
        let output = try await zonefeed.run(["run", file, "--progress", "never"])
        let took = ContinuousClock.now - started
        print("a silent TLS server failed the run after \(took)")
        #expect(output.status == 1, "\(output.stderr)")
        #expect(output.stderr.contains("TLS handshake did not finish in time"), "\(output.stderr)")
        #expect(output.stderr.contains("127.0.0.1:\(silent.port)"), "\(output.stderr)")
        #expect(!output.stderr.contains("retrying"), "\(output.stderr)")
        #expect(took < .seconds(120), "not retried for the whole budget")
    }

    /// A CA file that is not one is refused by `validate` at its line, before anything runs: a
    /// file without a certificate, a folder, and a FIFO nothing writes to, which held `validate`
    /// (and every run) in `open` for ever; it is read as the pipeline file is, waiting a few
    /// seconds for a writer.
    @Test(arguments: ["a file without a certificate", "a folder", "a FIFO"])
    func aCAFileThatHoldsNoCertificateIsRefusedAtItsLine(_ kind: String) async throws {
        var p = try await FakePipeline(prefix: "tlsbadca", fake: FakeSettings(seed: 215, zones: 1, recordsPerZone: 10))
        let zonefeed = try ZonefeedBinary(environment: p.environment)
        defer { zonefeed.remove() }
        let notACertificate = zonefeed.directory.appendingPathComponent("ca.pem")
        switch kind {
        case "a folder": try FileManager.default.createDirectory(at: notACertificate, withIntermediateDirectories: false)
        case "a FIFO": #expect(mkfifo(notACertificate.path, 0o600) == 0)
        default: try "not a certificate\n".write(to: notACertificate, atomically: true, encoding: .utf8)
        }
        p.serverURL = "https://127.0.0.1:9"
        p.moreCloudKit = ["tls:", "  caFile: \(notACertificate.path)"]
        let file = try p.write(to: zonefeed.directory)
        let line = try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
            .firstIndex { $0.contains("caFile:") }.map { $0 + 1 }
        let (output, timedOut) = try await zonefeed.start(["validate", file]).wait(within: .seconds(60))
        #expect(!timedOut, "validate ended")
        #expect(output.status == 2, "\(output.stderr)")
        #expect(output.stderr.contains(":\(line ?? 0):"), "the caFile line: \(output.stderr)")
        let reason = [
            "a file without a certificate": "holds no PEM certificate", "a folder": "was not read: Is a directory",
            "a FIFO": "was not read: it is a FIFO that nothing wrote to within 10 s",
        ][kind]!
        #expect(output.stderr.contains(reason), "\(output.stderr)")
    }
}
