import ArgumentParser
import EmbeddedPostgresServer
import FakeCloudKit
import Foundation
import LibPQ
import Logging
import ZoneFeedBench
import ZoneFeedPostgres

/// `zonefeed bench`: the options, the database and the signals; the phases are `Bench`'s, in
/// the ZoneFeedBench module.
struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Measure a backfill's records/s against PostgreSQL's own COPY ceiling, in process and over HTTP, and a no-op incremental run.",
        discussion: """
            Every phase writes the same generated records (the fake source without churn, so that \
            every entry creates a record; notes, folders and tags with every field type, mapped as \
            in pipelines/demo.yml) into the same database: a plain binary COPY of the encoded rows \
            (the ceiling), `zonefeed run` on the fake source, `zonefeed run` against `zonefeed \
            fake-server --prepare-pages` (its pages rendered before the clock starts, as a remote \
            CloudKit renders them on its own machines; they take the server about 1.7 GB per \
            1,000,000 records), then three runs with every token current. \
            Each run must leave exactly --records live rows, or the bench fails.
            """)

    @Option(help: "How many records each phase writes (1 to 100,000,000), split evenly over the zones.")
    var records = 1_000_000

    @Option(help: "How many zones hold the records (1 to 1000).")
    var zones = 4

    @Option(name: .customLong("parallel-zones"), help: "The runs' destination.parallelZones: how many zones they apply at once (1 to 16).")
    var parallelZones = PostgresSettings.defaultParallelZones

    @Option(
        help:
            "How many rounds of the ceiling, the in-process run and the run over HTTP to measure, one after the other (1 to 10); each figure is its fastest round's."
    )
    var rounds = 3

    @Option(name: .customLong("wan-records"), help: "How many records the WAN phase fetches from a fake server --wan-latency ms away (1 to 100,000,000).")
    var wanRecords = 320_000

    @Option(name: .customLong("wan-zones"), help: "How many zones hold the WAN phase's records (1 to 1000).")
    var wanZones = 32

    @Option(name: .customLong("wan-latency"), help: "The WAN phase's latency in milliseconds (1 to 60000); each answer varies by up to a fifth of it.")
    var wanLatency = 100

    @Option(
        name: .customLong("public-records"),
        help:
            "How many records the public database's phase holds (0 to 10,000,000; 0 skips it); about seven in ten are Notes, the one type it reads, --wan-latency ms away."
    )
    var publicRecords = 460_000

    @Option(
        name: .customLong("scale-out-processes"),
        help:
            "How many processes the scale-out phase runs at once on one pipeline of 64 zones, --wan-latency ms away, against one process (0 or 1 skips it; up to 16)."
    )
    var scaleOutProcesses = 4

    @Option(name: .customLong("scale-out-records"), help: "How many records the scale-out phase's 64 zones hold in all (64 to 6,400,000).")
    var scaleOutRecords = 128_000

    @Option(name: .customLong("database-url"), help: "A PostgreSQL server to use (a libpq URI or key=value string) instead of an embedded one.")
    var databaseURL: String?

    @Option(help: "The embedded server's folder: a new or empty one, or one it made before; its cluster is kept for the next bench.")
    var directory = ".zonefeed/bench-postgres"

    @Option(help: "The embedded server's port, 1 to 65535 (it only names its Unix socket).")
    var port = 5499

    @Option(help: "Also write the figures to this file, as a JSON object.")
    var json: String?

    @Flag(
        help:
            "Measure only zonefeed watch: the time from a change at a fake server to its row in PostgreSQL, with notifications and with them dropped.")
    var watch = false

    @Option(name: .customLong("watch-changes"), help: "How many changes the watch bench makes with notifications on (1 to 100,000).")
    var watchChanges = 200

    @Option(name: .customLong("watch-poll-interval"), help: "The watcher's safety poll, in seconds (1 to 86400), for the watch bench.")
    var watchPollInterval = 5

    @Flag(help: "Keep the bench schemas (bench_inprocess, bench_http, bench_wan) and the work folder with the pipelines and logs.")
    var keep = false

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical.", transform: Logger.Level.parse)
    var logLevel: Logger.Level = .notice

    // The flags' ranges: a hundred million records is hours of a bench; past the ranges a
    // count or a duration behind them could overflow.
    static let recordsRange = 1...100_000_000
    static let latencyRange = 1...60_000
    static let watchChangesRange = 1...100_000
    static let roundsRange = 1...10

    func validate() throws {
        try FlagRange.check("--records", records, in: Self.recordsRange)
        try FlagRange.check("--zones", zones, in: FakeSettings.zonesRange)
        try FlagRange.check("--parallel-zones", parallelZones, in: PostgresSettings.parallelZonesRange)
        try FlagRange.check("--rounds", rounds, in: Self.roundsRange)
        try FlagRange.check("--wan-records", wanRecords, in: Self.recordsRange)
        try FlagRange.check("--wan-zones", wanZones, in: FakeSettings.zonesRange)
        try FlagRange.check("--wan-latency", wanLatency, in: Self.latencyRange, unit: "milliseconds")
        try FlagRange.check("--public-records", publicRecords, in: 0...10_000_000)
        try FlagRange.check("--scale-out-processes", scaleOutProcesses, in: 0...16)
        try FlagRange.check("--scale-out-records", scaleOutRecords, in: 64...6_400_000)
        try FlagRange.check("--port", port, in: 1...65_535)
        try FlagRange.check("--watch-changes", watchChanges, in: Self.watchChangesRange)
        try FlagRange.check("--watch-poll-interval", watchPollInterval, in: 1...86_400, unit: "seconds")
        guard records % zones == 0 else {
            throw ValidationError("--records must be a multiple of --zones (\(zones)), so that every zone holds as many records")
        }
        guard wanRecords > 0, wanZones > 0, wanRecords % wanZones == 0 else {
            throw ValidationError("--wan-records must be a positive multiple of --wan-zones (\(wanZones))")
        }
    }

    func run() async throws {
        let level = logLevel
        let logger = Logger(label: "zonefeed.bench") { label in ZoneFeedLogHandler(label: label, format: .text, logLevel: level) }
        // SIGINT and SIGTERM end the children; each phase then stops at its next step, and the
        // embedded server is stopped on the way out as on any other failure. A second signal
        // exits at once.
        let signals = await ShutdownSignals()
        defer { signals.end() }
        let interruption = Bench.Interruption()
        let work: String
        do {
            work = try Self.makeWorkFolder()
        } catch {
            logger.error("\(error)")
            throw Exit.failed
        }

        if watch {
            try await runWatchBench(work: work, interruption: interruption, signals: signals, logger: logger)
            return
        }
        let report: BenchReport
        do {
            report = try await withBench(work: work, interruption: interruption, signals: signals, logger: logger) { try await $0.measure() }
        } catch {
            if let code = signals.exitCode {
                logger.warning("bench interrupted; its pipelines and logs are in \(work)")
                throw ExitCode(code)
            }
            logger.error("\(error)")
            logger.notice("the bench's pipelines and logs are kept in \(work)")
            throw Exit.failed
        }

        print(report.text)
        if let json {
            do {
                try report.jsonData.write(to: URL(fileURLWithPath: json))
            } catch {
                logger.error("could not write \(json) (\(error.localizedDescription)): choose a writable path for --json")
                throw Exit.failed
            }
        }
        if keep {
            Terminal.shared.writeLine("kept: schemas bench_inprocess, bench_http and bench_wan, and the work folder \(work)")
        } else {
            try? FileManager.default.removeItem(atPath: work)
        }
    }

    /// `--watch`: the watch phase alone.
    private func runWatchBench(work: String, interruption: Bench.Interruption, signals: ShutdownSignals, logger: Logger) async throws {
        let report: WatchBench.Report
        do {
            // As far away as the WAN phase's CloudKit (--wan-latency, 100 ms unless told).
            let watchOptions = WatchBench.Options(changes: watchChanges, pollIntervalSeconds: watchPollInterval, latencyMilliseconds: wanLatency)
            report = try await withBench(work: work, interruption: interruption, signals: signals, logger: logger) { bench in
                try await WatchBench(bench: bench, options: watchOptions).measure()
            }
        } catch {
            if let code = signals.exitCode { throw ExitCode(code) }
            logger.error("\(error)")
            logger.notice("the bench's pipelines and logs are kept in \(work)")
            throw Exit.failed
        }
        print(report.text)
        if !keep { try? FileManager.default.removeItem(atPath: work) }
    }

    /// Runs `body` with a `Bench` on the database, while SIGINT and SIGTERM interrupt it and end
    /// its children.
    private func withBench<T: Sendable>(
        work: String, interruption: Bench.Interruption, signals: ShutdownSignals, logger: Logger, _ body: @escaping @Sendable (Bench) async throws -> T
    ) async throws -> T {
        var options = Bench.Options(
            records: records, zones: zones, parallelZones: parallelZones, wanRecords: wanRecords, wanZones: wanZones,
            wanLatency: wanLatency, keep: keep)
        options.rounds = rounds
        options.publicRecords = publicRecords
        options.scaleOutProcesses = scaleOutProcesses
        options.scaleOutRecordsPerZone = scaleOutRecords / options.scaleOutZones
        return try await signals.handling(onFirst: {
            interruption.interrupt()
            ChildProcess.terminateAll()
        }) {
            try await withDatabase(logger: logger) { conninfo in
                try await body(
                    Bench(
                        options: options, conninfo: conninfo, work: work, interruption: interruption,
                        progress: { Terminal.shared.writeLine($0) }))
            }
        }
    }

    /// Runs `body` with a conninfo for `--database-url`, or for the embedded server, started
    /// first and stopped on every path.
    private func withDatabase<T>(logger: Logger, _ body: (String) async throws -> T) async throws -> T {
        if let databaseURL { return try await body(databaseURL) }
        Terminal.shared.writeLine("starting the embedded PostgreSQL server in \(directory)…")
        let embedded = EmbeddedPostgres(EmbeddedPostgres.Configuration(directory: directory, port: port), logger: logger)
        return try await embedded.withServer { handle in try await body(handle.connectionString) }
    }

    /// A fresh private folder for the pipeline files and the children's output.
    private static func makeWorkFolder() throws -> String {
        let parent = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array("\(parent)/zonefeed-bench-XXXXXX".utf8CString)
        guard let folder = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!).map { String(cString: $0) } }) else {
            throw Bench.Failure("could not create a work folder in \(parent) (\(String(cString: strerror(errno)))): check TMPDIR")
        }
        return folder
    }
}
