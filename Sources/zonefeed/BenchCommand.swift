import ArgumentParser
import EmbeddedPostgresServer
import CloudKitModel
import FakeCloudKit
import Foundation
import LibPQ
import Logging
import ZoneFeed
import ZoneFeedPostgres

/// `zonefeed bench`: how close a backfill comes to what PostgreSQL itself can ingest, in process
/// and over HTTP, and what an incremental run with nothing to do costs, all in one sitting on one
/// machine with the same records.
///
/// The runs are child processes of this very executable (`zonefeed run`, `zonefeed fake-server`),
/// so that each is timed as a user would meet it, start-up included, and its peak RSS is its own.
///
/// A synchronous command on purpose: every phase blocks (libpq, waiting for a child), and nothing
/// runs beside it, so it keeps the main thread rather than tie up the cooperative pool.
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

    @Option(help: "How many records each phase writes, split evenly over the zones.")
    var records = 1_000_000

    @Option(help: "How many zones hold the records.")
    var zones = 4

    @Option(name: .customLong("parallel-zones"), help: "The runs' destination.parallelZones: how many zones they apply at once.")
    var parallelZones = PostgresSettings.defaultParallelZones

    @Option(name: .customLong("wan-records"), help: "How many records the WAN phase fetches from a fake server --wan-latency ms away.")
    var wanRecords = 320_000

    @Option(name: .customLong("wan-zones"), help: "How many zones hold the WAN phase's records.")
    var wanZones = 32

    @Option(name: .customLong("wan-latency"), help: "The WAN phase's latency in milliseconds; each answer varies by up to a fifth of it.")
    var wanLatency = 100

    @Option(name: .customLong("database-url"), help: "A PostgreSQL server to use (a libpq URI or key=value string) instead of an embedded one.")
    var databaseURL: String?

    @Option(help: "The embedded server's folder; its cluster is kept for the next bench.")
    var directory = ".zonefeed/bench-postgres"

    @Option(help: "The embedded server's port (it only names its Unix socket).")
    var port = 5499

    @Option(help: "Also write the figures to this file, as a JSON object.")
    var json: String?

    @Flag(help: "Keep the bench schemas (bench_inprocess, bench_http, bench_wan) and the work folder with the pipelines and logs.")
    var keep = false

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel: Logger.Level = .notice

    func validate() throws {
        guard records > 0, zones > 0 else { throw ValidationError("--records and --zones must be at least 1") }
        guard (1...16).contains(parallelZones) else { throw ValidationError("--parallel-zones must be from 1 to 16") }
        guard records % zones == 0 else {
            throw ValidationError("--records must be a multiple of --zones (\(zones)), so that every zone holds as many records")
        }
        guard wanRecords > 0, wanZones > 0, wanRecords % wanZones == 0 else {
            throw ValidationError("--wan-records must be a positive multiple of --wan-zones (\(wanZones))")
        }
        guard wanLatency > 0 else { throw ValidationError("--wan-latency must be at least 1 ms") }
    }

    func run() async throws {
        let level = logLevel
        let logger = Logger(label: "zonefeed.bench") { label in ZoneFeedLogHandler(label: label, format: .text, logLevel: level) }
        // SIGINT and SIGTERM end the children; each phase then stops at its next step, and the
        // embedded server is stopped on the way out as on any other failure.
        let signals = SignalWatcher { _ in ChildProcess.terminateAll() }
        let work: String
        do {
            work = try Self.makeWorkFolder()
        } catch {
            logger.error("\(error)")
            throw Exit.failed
        }

        let report: Report
        do {
            report = try await withDatabase(logger: logger) { conninfo in
                try Bench(options: self, conninfo: conninfo, work: work, signals: signals).measure()
            }
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

    /// Runs `body` with a conninfo for `--database-url`, or for the embedded server, started
    /// first and stopped on every path.
    private func withDatabase<T>(logger: Logger, _ body: (String) throws -> T) async throws -> T {
        if let databaseURL { return try body(databaseURL) }
        Terminal.shared.writeLine("starting the embedded PostgreSQL server in \(directory)…")
        let embedded = EmbeddedPostgres(EmbeddedPostgres.Configuration(directory: directory, port: port), logger: logger)
        let handle = try await embedded.start()
        do {
            let value = try body(handle.connectionString)
            await embedded.stop(handle)
            return value
        } catch {
            await embedded.stop(handle)
            throw error
        }
    }

    /// A fresh private folder for the pipeline files and the children's output.
    private static func makeWorkFolder() throws -> String {
        let parent = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array("\(parent)/zonefeed-bench-XXXXXX".utf8CString)
        guard let folder = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!).map { String(cString: $0) } }) else {
            throw Failure("could not create a work folder in \(parent) (\(String(cString: strerror(errno)))): check TMPDIR")
        }
        return folder
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}

// MARK: - The phases

extension BenchCommand {
    /// One bench against one database.
    private struct Bench {
        let options: BenchCommand
        let conninfo: String
        let work: String
        let signals: SignalWatcher
        /// The children's environment: the database URL reaches the pipeline files through it, so
        /// that no password is ever written to a file.
        let environment: [String: String]

        static let databaseURLVariable = "ZONEFEED_BENCH_DATABASE_URL"
        static let commitEvery = 5_000
        static let noOpRuns = 3

        init(options: BenchCommand, conninfo: String, work: String, signals: SignalWatcher) {
            self.options = options
            self.conninfo = conninfo
            self.work = work
            self.signals = signals
            environment = ProcessInfo.processInfo.environment.merging([Self.databaseURLVariable: conninfo]) { _, new in new }
        }

        var records: Int { options.records }
        /// Without churn every entry creates a record, like a backfill from a nil token; pages of
        /// 200, CloudKit's largest `resultsLimit` and what the fake server serves by default.
        var settings: FakeSettings {
            FakeSettings(seed: 42, zones: options.zones, recordsPerZone: records / options.zones, pageSize: 200, churn: false)
        }

        func measure() throws -> Report {
            let version = try Connection.withConnection(conninfo) { c in
                try c.query("SELECT current_setting('server_version')").scalar ?? "?"
            }
            // "15.13 (Debian 15.13-1.pgdg120+1)": the version is the first word.
            var report = Report(records: records, zones: options.zones, postgresVersion: String(version.prefix { $0 != " " }))
            report.parallelZones = options.parallelZones
            Terminal.shared.writeLine("zonefeed bench: \(records.grouped) records in \(options.zones) zones, PostgreSQL \(report.postgresVersion)")

            let inProcess = try writePipeline(
                "bench-inprocess", schema: "bench_inprocess",
                source: """
                      fake:
                        seed: \(settings.seed)
                        zones: \(settings.zones)
                        recordsPerZone: \(settings.recordsPerZone)
                        pageSize: \(settings.pageSize)
                        churn: false
                    """)

            try checkNotInterrupted()
            // At one session, and at as many as the runs write with: ratios are to the fastest.
            report.ceilingRowsPerTransaction = Self.commitEvery
            for sessions in Set([1, options.parallelZones]).sorted() {
                report.ceilings.append(try measureCeiling(pipeline: inProcess, sessions: sessions))
            }

            try dropSchema(inProcess)
            Terminal.shared.writeLine("in-process run: zonefeed run on the fake source…")
            let first = try runPipeline(inProcess, label: "the in-process run", logName: "inprocess-run")
            try checkLiveRows(inProcess, label: "the in-process run", logName: "inprocess-run")
            report.inProcessSeconds = first.seconds
            report.inProcessPeakRSSBytes = first.peakRSSBytes

            let http = try measureOverHTTP()
            report.httpSeconds = http.seconds
            report.httpPeakRSSBytes = http.peakRSSBytes

            let wan = try measureOverWAN()
            report.wanRecords = options.wanRecords
            report.wanZones = options.wanZones
            report.wanLatencyMilliseconds = options.wanLatency
            report.wanSeconds = wan.seconds
            report.wanPeakRSSBytes = wan.peakRSSBytes

            Terminal.shared.writeLine("incremental no-op runs: zonefeed run on the in-process pipeline, \(Self.noOpRuns) times…")
            for i in 1...Self.noOpRuns {
                let run = try runPipeline(inProcess, label: "no-op run \(i)", logName: "noop-run-\(i)")
                report.noOpRunSeconds.append(run.seconds)
            }
            try checkNothingReapplied(inProcess)

            if !options.keep {
                try dropSchema(inProcess)
                try dropSchema(named: "bench_http")
                try dropSchema(named: "bench_wan")
            }
            return report
        }

        // MARK: Ceiling

        /// PostgreSQL's own speed: the generator's records, encoded in memory first, then copied
        /// with plain binary COPY into tables shaped like the pipeline's, in a schema of their own.
        func measureCeiling(pipeline: Pipeline, sessions: Int) throws -> CopyCeiling.Measurement {
            var shape = pipeline.postgres
            shape.schema = "bench_ceiling"
            try dropSchema(named: shape.schema)
            defer { try? dropSchema(named: shape.schema) }
            var ceiling = CopyCeiling(schema: PostgresSchema(pipelineName: pipeline.name, settings: shape), conninfo: conninfo)
            ceiling.rowsPerTransaction = Self.commitEvery
            try ceiling.createTables()
            checkpoint()

            Terminal.shared.writeLine("ceiling: encoding \(records.grouped) rows in memory, then COPY on \(sessions) session\(sessions == 1 ? "" : "s")…")
            let feed = FakeFeed(settings: settings)
            var zone = 0, position = 0
            let measurement = try ceiling.measure(sessions: sessions, zone: feed.zoneID) {
                while zone < feed.settings.zones {
                    guard position < feed.entriesPerZone else {
                        zone += 1
                        position = 0
                        continue
                    }
                    let end = min(position + Self.commitEvery, feed.entriesPerZone)
                    let entries = feed.entries(zone: zone, range: position..<end)
                    position = end
                    return (zone, entries.compactMap { entry -> Record? in
                        if case .record(let record) = entry { return record }
                        return nil
                    })
                }
                return nil
            }
            try ceiling.dropTables()
            // A child's peak RSS can be no lower than this process's RSS when it was spawned (see
            // `ChildProcess.resetPeakRSS`): the ceiling's encoded rows must be given back first.
            FreedMemory.release()
            guard measurement.rows == records else {
                throw Failure("the ceiling wrote \(measurement.rows.grouped) rows instead of \(records.grouped): the generator's records no longer fit the bench's mapping")
            }
            return measurement
        }

        // MARK: Over HTTP

        /// `zonefeed run` with the CloudKit client against `zonefeed fake-server` on loopback,
        /// which serves the same records; the server is stopped on every path. The server renders
        /// its pages before it listens: on a machine of two cores, rendering them during the run
        /// would take a fifth of the CPU from the client and PostgreSQL, which a real CloudKit
        /// does not, and hold up every request behind the one before.
        func measureOverHTTP() throws -> ProcessRun {
            try checkNotInterrupted()
            Terminal.shared.writeLine("over HTTP: starting zonefeed fake-server, which renders its pages first…")
            return try runAgainstFakeServer(
                name: "http", label: "the run over HTTP", settings: settings, serverArguments: [], defaults: false)
        }

        // MARK: Over a WAN

        /// `zonefeed run` with the pipeline's default settings against a fake server that answers
        /// every request `--wan-latency` ms late, give or take a fifth, as CloudKit far away does:
        /// what many requests in flight buy over one page per round trip. The server accepts
        /// every token it issued, as one live test found CloudKit does; against one that accepts
        /// only the newest, zonefeed goes one request at a time (README).
        func measureOverWAN() throws -> ProcessRun {
            try checkNotInterrupted()
            let wanSettings = FakeSettings(
                seed: 43, zones: options.wanZones, recordsPerZone: options.wanRecords / options.wanZones, pageSize: 200, churn: false)
            Terminal.shared.writeLine("over a WAN: starting zonefeed fake-server with \(options.wanLatency) ms of latency…")
            return try runAgainstFakeServer(
                name: "wan", label: "the run over a WAN", settings: wanSettings,
                serverArguments: ["--latency", "\(options.wanLatency),\(max(1, options.wanLatency / 5))"], defaults: true)
        }

        /// Starts `zonefeed fake-server --prepare-pages` with `settings`, runs a pipeline
        /// `bench-<name>` (schema `bench_<name>`) against it, checks its rows and stops the server
        /// on every path. `defaults`: the pipeline leaves commitEvery and parallelZones to their
        /// defaults.
        func runAgainstFakeServer(
            name: String, label: String, settings: FakeSettings, serverArguments: [String], defaults: Bool
        ) throws -> ProcessRun {
            let server = try ChildProcess(
                name: "the fake server for \(label)", executable: ChildProcess.currentExecutable,
                arguments: [
                    "fake-server", "--port", "0", "--zones", "\(settings.zones)", "--records-per-zone", "\(settings.recordsPerZone)",
                    "--seed", "\(settings.seed)", "--page-size", "\(settings.pageSize)", "--no-churn", "--prepare-pages",
                ] + serverArguments,
                environment: environment, stdout: .pipe, stderr: .file(path("\(name)-server.stderr")))
            defer { server.terminate() }
            let baseURL = try readyURL(of: server, logName: "\(name)-server", records: settings.zones * settings.recordsPerZone)

            let pipeline = try writePipeline(
                "bench-\(name)", schema: "bench_\(name)", defaults: defaults,
                source: """
                      cloudkit:
                        baseURL: \(yamlString(baseURL))
                        container: iCloud.com.example.fake
                        environment: development
                        database: private
                        zones: all
                        auth:
                          apiToken: fake-api-token
                          webAuthToken: fake-web-auth-token
                          webAuthTokenFile: \(yamlString(path("bench-\(name).web-auth-token")))
                    """)
            try dropSchema(pipeline)
            let records = settings.zones * settings.recordsPerZone
            Terminal.shared.writeLine("\(label): zonefeed run against \(baseURL), \(records.grouped) records in \(settings.zones) zones…")
            let run = try runPipeline(pipeline, label: label, logName: "\(name)-run")
            try checkLiveRows(pipeline, label: label, logName: "\(name)-run", expected: records)
            return run
        }

        /// The URL in the fake server's ready line,
        /// `fake CloudKit server listening on http://127.0.0.1:PORT (container …)`.
        func readyURL(of server: ChildProcess, logName: String, records: Int) throws -> String {
            // The server renders its pages before it listens: a few seconds per 100,000 records.
            let timeout = 60 + records / 10_000
            let deadline = ContinuousClock.now + .seconds(timeout)
            while let line = server.readLine(before: deadline) {
                if let range = line.range(of: " listening on "), let url = line[range.upperBound...].split(separator: " ").first {
                    return String(url)
                }
            }
            try checkNotInterrupted()
            if ContinuousClock.now >= deadline {
                throw Failure("the fake server did not say it was listening within \(timeout) s" + stderrTail(logName))
            }
            let status = server.wait().status
            throw Failure("the fake server exited with status \(status) before it listened" + stderrTail(logName))
        }

        // MARK: Runs

        struct ProcessRun {
            var seconds: Double
            var peakRSSBytes: Int
        }

        /// `zonefeed run FILE --progress never` as a child, timed from spawn to exit; its stdout
        /// and stderr go to `<logName>.stdout` and `.stderr` in the work folder.
        func runPipeline(_ pipeline: Pipeline, label: String, logName: String) throws -> ProcessRun {
            try checkNotInterrupted()
            checkpoint()
            let started = ContinuousClock.now
            let child = try ChildProcess(
                name: label, executable: ChildProcess.currentExecutable,
                arguments: ["run", pipeline.filePath, "--progress", "never"],
                environment: environment, stdout: .file(path(logName + ".stdout")), stderr: .file(path(logName + ".stderr")))
            let end = child.wait()
            let seconds = (ContinuousClock.now - started).seconds
            try checkNotInterrupted()
            guard end.status == 0 else {
                throw Failure("\(label) exited with status \(end.status)" + stderrTail(logName))
            }
            return ProcessRun(seconds: seconds, peakRSSBytes: end.peakRSSBytes)
        }

        /// A run that lost or duplicated rows is not worth timing.
        func checkLiveRows(_ pipeline: Pipeline, label: String, logName: String, expected: Int? = nil) throws {
            let records = expected ?? self.records
            let tables = PostgresSchema(pipelineName: pipeline.name, settings: pipeline.postgres).tables
            let sql = "SELECT " + tables.map { "(SELECT count(*) FROM \($0.liveViewName))" }.joined(separator: " + ")
            let live = try Connection.withConnection(conninfo) { c in try c.query(sql).scalar.flatMap { Int($0) } ?? 0 }
            guard live == records else {
                throw Failure(
                    "\(label) left \(live.grouped) live rows in schema \(pipeline.postgres.schema) instead of \(records.grouped), "
                        + "so its figures would mean nothing; its log is \(path(logName + ".stderr"))")
            }
        }

        /// Every token was current, so the no-op runs must have applied nothing: the runs of the
        /// pipeline upserted the records once in all.
        func checkNothingReapplied(_ pipeline: Pipeline) throws {
            let runs = "\(quoteIdentifier(pipeline.postgres.schema)).zonefeed_runs"
            let upserts = try Connection.withConnection(conninfo) { c in
                try c.query("SELECT coalesce(sum(upserts), 0) FROM \(runs) WHERE pipeline = $1", [pipeline.name]).scalar.flatMap { Int($0) } ?? 0
            }
            guard upserts == records else {
                throw Failure("the no-op runs applied records again (\(upserts.grouped) upserts in all, \(records.grouped) expected), so they were no no-op; their logs are noop-run-*.stderr in \(work)")
            }
        }

        // MARK: Helpers

        func path(_ name: String) -> String { work + "/" + name }

        /// Writes a pipeline file into the work folder, with the demo's mapping, and loads it as a
        /// run will.
        func writePipeline(_ name: String, schema: String, defaults: Bool = false, source: String) throws -> Pipeline {
            let file = path(name + ".yml")
            let text = """
                # Written by zonefeed bench. The database URL is in the environment of the bench's runs.
                pipeline: \(name)
                source:
                \(source)
                destination:
                  url: ${\(Self.databaseURLVariable)}
                  schema: \(schema)
                \(defaults ? "" : "  commitEvery: \(Self.commitEvery)\n  parallelZones: \(options.parallelZones)")
                \(Self.recordTypes)
                """
            try Data(text.utf8).write(to: URL(fileURLWithPath: file))
            do {
                return try Pipeline.load(path: file, components: .zonefeed, environment: environment)
            } catch let error as PipelineFileError {
                throw Failure("the bench wrote a pipeline that zonefeed refuses; this is a bug in zonefeed bench:\n\(error)")
            }
        }

        /// As in pipelines/demo.yml, so that every CloudKit field type goes through a typed column.
        static let recordTypes = """
            recordTypes:
              Note:
                table: notes
                fields:
                  title: text
                  body: text
                  wordCount: bigint
                  rating: double precision
                  editedAt: timestamptz
                  thumbnail: bytea
                  folder: text
                  attachment: jsonb
                  place: jsonb
                  tags: text[]
                  counts: bigint[]
                  scores: double precision[]
                  reminders: timestamptz[]
                  chunks: bytea[]
                  related: text[]
              Folder:
                table: folders
                fields:
                  name: text
                  color: bigint
                  parent: { column: parent_folder, type: text }
              Tag:
                table: tags
            unmappedFields: keep
            unknownRecordTypes: skip
            onBadRecord: reject
            """

        /// A YAML double-quoted scalar; JSON's escapes are YAML's.
        func yamlString(_ value: String) -> String {
            JSONValue.string(value).jsonText
        }

        func dropSchema(_ pipeline: Pipeline) throws {
            try dropSchema(named: pipeline.postgres.schema)
        }

        func dropSchema(named schema: String) throws {
            try Connection.withConnection(conninfo) { c -> Void in
                try c.execute("DROP SCHEMA IF EXISTS \(quoteIdentifier(schema)) CASCADE")
            }
        }

        /// Writes the previous phase's dirty pages out now, so that they are not written on the
        /// next phase's clock. Only a superuser may; on another server the phases share that cost.
        func checkpoint() {
            _ = try? Connection.withConnection(conninfo) { c in try c.execute("CHECKPOINT") }
        }

        func checkNotInterrupted() throws {
            if let signal = signals.signal { throw Failure("interrupted by signal \(signal)") }
        }

        /// The last lines a child wrote to stderr, for the message of its failure.
        func stderrTail(_ logName: String, lines: Int = 20) -> String {
            let file = path(logName + ".stderr")
            let text = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
            let tail = text.split(separator: "\n", omittingEmptySubsequences: false).suffix(lines + 1).joined(separator: "\n")
                .trimmingCharacters(in: .whitespacesAndNewlines)
            guard !tail.isEmpty else { return " and wrote nothing to stderr" }
            return "; the end of its stderr (all of it in \(file)):\n" + tail
        }
    }
}

// MARK: - The figures

extension BenchCommand {
    struct Report {
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
        var wanSeconds = 0.0
        var wanPeakRSSBytes = 0
        var inProcessSeconds = 0.0
        var inProcessPeakRSSBytes = 0
        var httpSeconds = 0.0
        var httpPeakRSSBytes = 0
        var noOpRunSeconds: [Double] = []

        init(records: Int, zones: Int, postgresVersion: String) {
            self.records = records
            self.zones = zones
            self.postgresVersion = postgresVersion
        }

        var inProcessRPS: Double { Double(records) / inProcessSeconds }
        var httpRPS: Double { Double(records) / httpSeconds }
        var wanRPS: Double { Double(wanRecords) / wanSeconds }
        /// One request at a time: a page of 200 records per round trip.
        var wanBoundRPS: Double { 200 / (Double(wanLatencyMilliseconds) / 1000) }
        var noOpMedianSeconds: Double { noOpRunSeconds.sorted()[noOpRunSeconds.count / 2] }

        var text: String {
            func rate(_ label: String, rps: Double, seconds: Double, peakRSS: Int?) -> String {
                var line = label.padding(toLength: 33, withPad: " ", startingAt: 0)
                    + leftPadded(Int(rps.rounded()).grouped, 9) + " records/s"
                    + leftPadded(String(format: "%.2fx", rps / ceilingRPS), 8)
                    + leftPadded(Self.seconds(seconds), 9)
                if let peakRSS { line += "   peak RSS \(Int((Double(peakRSS) / 1_000_000).rounded()).grouped) MB" }
                return line
            }
            let ceilingLines = ceilings.map { c in
                rate("ceiling (COPY, \(c.sessions) session\(c.sessions == 1 ? "" : "s"))", rps: c.rowsPerSecond, seconds: c.seconds, peakRSS: nil)
                    + String(format: "   %.0f bytes/row, %.1f MB/s", c.bytesPerRow, c.megabytesPerSecond)
            }
            let wan = "over a WAN (\(wanLatencyMilliseconds) ms, \(wanZones) zones)".padding(toLength: 33, withPad: " ", startingAt: 0)
                + leftPadded(Int(wanRPS.rounded()).grouped, 9) + " records/s"
                + leftPadded(String(format: "%.1fx", wanRPS / wanBoundRPS), 8) + " the one-request bound (\(Int(wanBoundRPS).grouped)/s)"
                + "   \(Self.seconds(wanSeconds))   peak RSS \(Int((Double(wanPeakRSSBytes) / 1_000_000).rounded()).grouped) MB"
            let header = [
                "zonefeed bench: \(records.grouped) records, \(zones) zones (\(parallelZones) at once), PostgreSQL \(postgresVersion)",
                "ratios are to the fastest ceiling; COPY writes \(ceilingRowsPerTransaction.grouped) rows a transaction",
            ]
            return (header + ceilingLines + [
                rate("in-process run", rps: inProcessRPS, seconds: inProcessSeconds, peakRSS: inProcessPeakRSSBytes),
                rate("over HTTP (fake-server)", rps: httpRPS, seconds: httpSeconds, peakRSS: httpPeakRSSBytes),
                wan,
                "incremental no-op run".padding(toLength: 33, withPad: " ", startingAt: 0)
                    + "\(Self.seconds(noOpMedianSeconds)) wall (median of \(noOpRunSeconds.map { String(format: "%.2f", $0) }.joined(separator: ", ")))",
            ]).joined(separator: "\n")
        }

        /// "12.5 s", with a second decimal under ten seconds.
        static func seconds(_ value: Double) -> String {
            String(format: value < 10 ? "%.2f s" : "%.1f s", value)
        }

        func leftPadded(_ text: String, _ width: Int) -> String {
            String(repeating: " ", count: max(0, width - text.count)) + text
        }

        /// The figures as a JSON object with snake_case keys: rates in whole records per second,
        /// times to the millisecond, ratios to the ceiling's rate.
        var jsonData: Data {
            get throws {
                func rounded(_ value: Double) -> JSONValue { .double((value * 1000).rounded() / 1000) }
                let object: [String: JSONValue] = [
                    "records": .int(Int64(records)),
                    "zones": .int(Int64(zones)),
                    "parallel_zones": .int(Int64(parallelZones)),
                    // The HTTP run's pages were rendered before its clock started (`--prepare-pages`).
                    "http_pages_prepared": .bool(true),
                    "postgres_version": .string(postgresVersion),
                    "ceiling_rows_per_transaction": .int(Int64(ceilingRowsPerTransaction)),
                    "ceiling_rps": .int(Int64(ceilingRPS.rounded())),
                    "ceiling_seconds": rounded(ceiling.seconds),
                    "ceiling_sessions": .int(Int64(ceiling.sessions)),
                    "ceiling_bytes_per_row": rounded(ceiling.bytesPerRow),
                    "ceiling_mb_per_second": rounded(ceiling.megabytesPerSecond),
                    "ceilings": .array(ceilings.map { c in
                        .object([
                            "sessions": .int(Int64(c.sessions)), "rps": .int(Int64(c.rowsPerSecond.rounded())),
                            "seconds": rounded(c.seconds), "bytes_per_row": rounded(c.bytesPerRow), "mb_per_second": rounded(c.megabytesPerSecond),
                        ])
                    }),
                    "wan_records": .int(Int64(wanRecords)),
                    "wan_zones": .int(Int64(wanZones)),
                    "wan_latency_ms": .int(Int64(wanLatencyMilliseconds)),
                    "wan_rps": .int(Int64(wanRPS.rounded())),
                    "wan_bound_rps": .int(Int64(wanBoundRPS.rounded())),
                    "wan_ratio_to_bound": rounded(wanRPS / wanBoundRPS),
                    "wan_seconds": rounded(wanSeconds),
                    "wan_peak_rss_bytes": .int(Int64(wanPeakRSSBytes)),
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
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
                return try encoder.encode(JSONValue.object(object)) + Data("\n".utf8)
            }
        }
    }
}
