import CloudKitModel
import FakeCloudKit
import Foundation
import LibPQ
import NIOPosix
import Subprocess
import Synchronization
import SystemPackage
import ZoneFeed
import ZoneFeedComponents
import ZoneFeedPostgres

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// `zonefeed bench`: how close a backfill comes to what PostgreSQL itself can ingest, in process
/// and over HTTP, and what an incremental run with nothing to do costs, all in one sitting on one
/// machine with the same records.
///
/// The runs are child processes of this very executable (`zonefeed run`, `zonefeed fake-server`),
/// so that each is timed as a user would meet it, start-up included, and its peak RSS is its own.
/// The long blocking steps (encoding and copying the ceiling, waiting for a run) go to a dispatch
/// thread, off Swift's cooperative pool; the fake server runs through swift-subprocess, the timed
/// runs through `ChildProcess`, for their peak RSS.
public struct Bench: Sendable {
    /// What the command line asks for.
    public struct Options: Sendable {
        public var records: Int
        public var zones: Int
        public var parallelZones: Int
        public var wanRecords: Int
        public var wanZones: Int
        public var wanLatency: Int
        /// Records in the public database's phase (0: no such phase).
        public var publicRecords = 0
        /// Processes of the scale-out phase (0 skips it), on `scaleOutZones` zones.
        public var scaleOutProcesses = 0
        public var scaleOutZones = 64
        public var scaleOutRecordsPerZone = 2_000
        /// How many times the ceiling and the two backfills are measured, one after the other:
        /// the figures are each one's fastest, since this machine's speed moves by a third
        /// within minutes (docs/performance.md).
        public var rounds = 3 {
            didSet { rounds = max(1, rounds) }
        }
        /// Keep the bench schemas.
        public var keep: Bool

        public init(records: Int, zones: Int, parallelZones: Int, wanRecords: Int, wanZones: Int, wanLatency: Int, keep: Bool) {
            self.records = records
            self.zones = zones
            self.parallelZones = parallelZones
            self.wanRecords = wanRecords
            self.wanZones = wanZones
            self.wanLatency = wanLatency
            self.keep = keep
        }
    }

    /// Set by the command when SIGINT or SIGTERM arrives; each phase stops at its next step.
    public final class Interruption: Sendable {
        private let interrupted = Mutex(false)
        public init() {}
        public var isInterrupted: Bool { interrupted.withLock { $0 } }
        public func interrupt() { interrupted.withLock { $0 = true } }
    }

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
        public init(_ description: String) { self.description = description }
    }

    public let options: Options
    let conninfo: String
    let work: String
    let interruption: Interruption
    /// Where the bench says what it is doing, a line at a time.
    let progress: @Sendable (String) -> Void
    /// The children's environment: the database URL reaches the pipeline files through it, so
    /// that no password is ever written to a file.
    let environment: [String: String]
    /// The peak RSS of every `zonefeed run` the bench timed, the issue's bound being on each.
    let peaks = PeakRSSLog()
    /// The server's CPU, when it runs on this machine: found when the bench starts measuring.
    private let server = ServerCPU.Slot()
    var serverCPU: ServerCPU? { server.value }

    static let databaseURLVariable = "ZONEFEED_BENCH_DATABASE_URL"
    static let commitEvery = PostgresSettings.defaultCommitEvery
    static let noOpRuns = 3
    /// The schema of a run against a fake server, `bench-<name>`'s.
    static func schema(ofRun name: String) -> String { "bench_\(name)" }

    public init(
        options: Options, conninfo: String, work: String, interruption: Interruption,
        progress: @escaping @Sendable (String) -> Void
    ) {
        self.options = options
        self.conninfo = conninfo
        self.work = work
        self.interruption = interruption
        self.progress = progress
        environment = ProcessInfo.processInfo.environment.merging([Self.databaseURLVariable: conninfo]) { _, new in new }
    }

    var records: Int { options.records }
    /// Without churn every entry creates a record, like a backfill from a nil token; pages of
    /// 200, CloudKit's largest `resultsLimit` and what the fake server serves by default. Notes
    /// take their fields from `fieldSets` sets a zone, written once: the in-process source made
    /// every note's JSON afresh, 40% of that run's CPU (perf), work that neither CloudKit nor the
    /// fake server of the run over HTTP (its pages made before the clock) leaves to a run. The
    /// ceiling and both runs write the same records.
    var settings: FakeSettings {
        FakeSettings(seed: 42, zones: options.zones, recordsPerZone: records / options.zones, pageSize: 200, churn: false, fieldSets: Self.fieldSets)
    }
    static let fieldSets = 1_024

    /// Every phase, one after another; throws when one fails or the bench is interrupted.
    public func measure() async throws -> BenchReport {
        let found = try await NIOThreadPool.singleton.runIfActive { [conninfo] in ServerCPU.find(conninfo: conninfo) }
        server.value = found
        let version = try Connection.withConnection(conninfo) { c in
            try c.query("SELECT current_setting('server_version')").scalar ?? "?"
        }
        // "15.13 (Debian 15.13-1.pgdg120+1)": the version is the first word.
        var report = BenchReport(records: records, zones: options.zones, postgresVersion: String(version.prefix { $0 != " " }))
        report.parallelZones = options.parallelZones
        progress("zonefeed bench: \(records.grouped) records in \(options.zones) zones, PostgreSQL \(report.postgresVersion)")

        let inProcess = try writePipeline(
            "bench-inprocess", schema: Self.schema(ofRun: "inprocess"),
            source: """
                  fake:
                    seed: \(settings.seed)
                    zones: \(settings.zones)
                    recordsPerZone: \(settings.recordsPerZone)
                    pageSize: \(settings.pageSize)
                    churn: false
                    fieldSets: \(Self.fieldSets)
                """)

        try checkNotInterrupted()
        // The ceiling at one session once, then the ceiling at as many sessions as the runs
        // write with and the two backfills, round after round: this machine's speed moves by a
        // third within minutes (docs/performance.md), so one sample of each would make a ratio
        // of the drift's. Every figure is its fastest round's, the ceiling's included.
        report.ceilingRowsPerTransaction = Self.commitEvery
        report.fieldSets = settings.fieldSets
        if options.parallelZones != 1 {
            report.ceilings.append(try await NIOThreadPool.singleton.runIfActive { try measureCeiling(pipeline: inProcess, sessions: 1) })
        }
        // The fake server of the runs over HTTP renders its pages once, before the rounds: the
        // gigabytes it takes are not taken afresh just before every run over HTTP, which on a
        // virtual machine that hands free memory back to its host would leave that run alone
        // to write into memory the host must find again (docs/performance.md).
        try await withPreparedFakeServer(
            name: "http", settings: settings, serverArguments: [], announcing: "over HTTP: starting zonefeed fake-server, which renders its pages first…"
        ) { server in
            for round in 1...options.rounds {
                // Each round's ceiling meets the database the first one did: without the
                // backfills' tables of the round before.
                try dropSchema(named: Self.schema(ofRun: "http"))
                try dropSchema(inProcess)
                var ceiling = try await NIOThreadPool.singleton.runIfActive { try measureCeiling(pipeline: inProcess, sessions: options.parallelZones) }
                ceiling.round = round
                report.ceilings.append(ceiling)

                let label = "the in-process run\(roundSuffix(round))"
                progress("\(label): zonefeed run on the fake source…")
                let logName = "inprocess-run\(options.rounds == 1 ? "" : "-\(round)")"
                let run = try await NIOThreadPool.singleton.runIfActive { try runPipeline(inProcess, label: label, logName: logName, writing: records) }
                try checkLiveRows(inProcess, label: label, logName: logName)
                report.inProcessRuns.append(
                    .init(round: round, run: run, cpu: .init(label: "in-process run", key: "inprocess", records: records, run: run, jsonBytes: nil)))

                let (http, httpJSON, httpPages) = try await measureOverHTTP(against: server, round: round)
                if round == 1 { try checkSameNotes() }
                report.httpRuns.append(
                    .init(
                        round: round, run: http,
                        cpu: .init(label: "over HTTP (fake-server)", key: "http", records: records, run: http, jsonBytes: httpJSON), pages: httpPages))
            }
        }
        report.cpu += [report.inProcess.cpu, report.http.cpu]

        report.wanRecords = options.wanRecords
        report.wanZones = options.wanZones
        report.wanLatencyMilliseconds = options.wanLatency
        report.wanRuns.append(try await measureOverWAN(tls: false))
        report.wanRuns.append(try await measureOverWAN(tls: true))
        report.cpu += report.wanRuns.map(\.cpu)

        if options.publicRecords > 0 {
            let publicRun = try await PublicBench(bench: self, records: options.publicRecords, latencyMilliseconds: options.wanLatency).measure()
            report.publicRun = publicRun
            if let cpu = publicRun.backfillCPU { report.cpu.append(cpu) }
        }

        if options.scaleOutProcesses > 1 {
            report.scaleOut = try await ScaleOutBench(
                bench: self, processes: options.scaleOutProcesses, zones: options.scaleOutZones, recordsPerZone: options.scaleOutRecordsPerZone,
                latencyMilliseconds: options.wanLatency
            ).measure()
        }

        progress("incremental no-op runs: zonefeed run on the in-process pipeline, \(Self.noOpRuns) times…")
        for i in 1...Self.noOpRuns {
            let run = try await NIOThreadPool.singleton.runIfActive { try runPipeline(inProcess, label: "no-op run \(i)", logName: "noop-run-\(i)") }
            report.noOpRunSeconds.append(run.seconds)
        }
        try checkNothingReapplied(inProcess)

        if !options.keep {
            try dropSchema(inProcess)
            try dropSchema(named: Self.schema(ofRun: "http"))
            try dropSchema(named: Self.schema(ofRun: "wan"))
            try dropSchema(named: Self.schema(ofRun: "wantls"))
        }
        report.runPeaks = peaks.all
        return report
    }

    // MARK: Ceiling

    /// PostgreSQL's own speed: the generator's records, encoded in memory first, then copied
    /// with plain binary COPY into tables shaped like the pipeline's, in a schema of their own.
    func measureCeiling(pipeline: Pipeline, sessions: Int) throws -> CopyCeiling.Measurement {
        var shape = try pipeline.postgresSettings()
        shape.schema = "bench_ceiling"
        try dropSchema(named: shape.schema)
        defer { try? dropSchema(named: shape.schema) }
        var ceiling = CopyCeiling(schema: PostgresSchema(pipelineName: pipeline.name, settings: shape), conninfo: conninfo)
        ceiling.rowsPerTransaction = Self.commitEvery
        ceiling.serverCPU = serverCPU
        ceiling.beforeTheClock = { [records] in warmUp(rows: records) }
        try ceiling.createTables()
        checkpoint()

        progress("ceiling: encoding \(records.grouped) rows in memory, then COPY on \(sessions) session\(sessions == 1 ? "" : "s")…")
        let feed = FakeFeed(settings: settings)
        var zone = 0
        var position = 0
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
                return (
                    zone,
                    entries.compactMap { entry -> Record? in
                        if case .record(let record) = entry { return record }
                        return nil
                    }
                )
            }
            return nil
        }
        try ceiling.dropTables()
        // A child's peak RSS can be no lower than this process's RSS when it was spawned (see
        // `ChildProcess.resetPeakRSS`): the ceiling's encoded rows must be given back first.
        FreedMemory.release()
        guard measurement.rows == records else {
            throw Failure(
                "the ceiling wrote \(measurement.rows.grouped) rows instead of \(records.grouped): the generator's records no longer fit the bench's mapping")
        }
        return measurement
    }

    // MARK: Over HTTP

    /// `zonefeed run` with the CloudKit client against `zonefeed fake-server` on loopback,
    /// which serves the same records, from nil tokens. The server rendered its pages before it
    /// listened: on a machine of two cores, rendering them during the run would take a fifth of
    /// the CPU from the client and PostgreSQL, which a real CloudKit does not, and hold up every
    /// request behind the one before.
    /// The run, the bytes of JSON the server answered it with, and the prepared pages it served.
    func measureOverHTTP(against server: BenchServer, round: Int) async throws -> (run: ProcessRun, jsonBytes: Int, pages: PreparedPages) {
        try checkNotInterrupted()
        let bytes = try await server.trafficCount("bodyBytes")
        let served = try await server.count("preparedPagesServed")
        let run = try await runPipeline(
            against: server, name: "http", label: "the run over HTTP\(roundSuffix(round))", settings: settings, defaults: false,
            logName: "http-run\(options.rounds == 1 ? "" : "-\(round)")")
        let pages = PreparedPages(prepared: try await server.count("preparedPages"), served: try await server.count("preparedPagesServed") - served)
        return (run, try await server.trafficCount("bodyBytes") - bytes, pages)
    }

    /// ", round 2 of 3" in the progress lines, when there is more than one.
    func roundSuffix(_ round: Int) -> String {
        options.rounds == 1 ? "" : ", round \(round) of \(options.rounds)"
    }

    /// The pages the fake server rendered before the runs over HTTP, and how many of a run's
    /// answers were those: a request it had no page for (other `desiredKeys`, another limit) is
    /// rendered while the run waits, inside its clock.
    struct PreparedPages: Sendable {
        var prepared = 0
        var served = 0
        /// Every answer of the run was a page rendered beforehand, each once.
        var servedAll: Bool { prepared > 0 && served == prepared }
    }

    // MARK: Over a WAN

    /// `zonefeed run` with the pipeline's default settings against a fake server that answers
    /// every request `--wan-latency` ms late, give or take a fifth, as CloudKit far away does:
    /// what many requests in flight buy over one page per round trip. The server accepts
    /// every token it issued, as one live test found CloudKit does; against one that accepts
    /// only the newest, zonefeed goes one request at a time (docs/cloudkit.md, "Web auth tokens").
    func measureOverWAN(tls: Bool) async throws -> BenchReport.WANRun {
        let wanSettings = FakeSettings(
            seed: 43, zones: options.wanZones, recordsPerZone: options.wanRecords / options.wanZones, pageSize: 200, churn: false)
        let transport = tls ? "TLS + HTTP/2" : "HTTP/1.1"
        var connections = 0
        var bytes = 0
        let run = try await runAgainstFakeServer(
            name: tls ? "wantls" : "wan", label: "the run over a WAN (\(transport))", settings: wanSettings,
            serverArguments: ["--latency", "\(options.wanLatency),\(max(1, options.wanLatency / 5))"] + (tls ? ["--tls"] : []), defaults: true,
            announcing: "over a WAN (\(transport)): starting zonefeed fake-server with \(options.wanLatency) ms of latency…"
        ) { server in
            connections = try await server.trafficCount("connections")
            bytes = try await server.trafficCount("bodyBytes")
        }
        return BenchReport.WANRun(
            transport: transport, key: tls ? "wan_tls" : "wan", seconds: run.seconds, peakRSSBytes: run.peakRSSBytes, connections: connections,
            cpu: .init(label: "over a WAN (\(transport))", key: tls ? "wan_tls" : "wan", records: options.wanRecords, run: run, jsonBytes: bytes))
    }

    /// Starts `zonefeed fake-server --prepare-pages` with `settings`, runs a pipeline
    /// `bench-<name>` against it and stops the server on every path.
    func runAgainstFakeServer(
        name: String, label: String, settings: FakeSettings, serverArguments: [String], defaults: Bool, announcing: String,
        afterwards: (BenchServer) async throws -> Void = { _ in }
    ) async throws -> ProcessRun {
        try await withPreparedFakeServer(name: name, settings: settings, serverArguments: serverArguments, announcing: announcing) { server in
            let run = try await runPipeline(against: server, name: name, label: label, settings: settings, defaults: defaults)
            try await afterwards(server)
            return run
        }
    }

    /// Runs `body` with a `zonefeed fake-server --prepare-pages` serving `settings`' records,
    /// stopped on every path; `announcing` is the progress line said as it starts.
    func withPreparedFakeServer<T: Sendable>(
        name: String, settings: FakeSettings, serverArguments: [String], announcing: String, _ body: (BenchServer) async throws -> T
    ) async throws -> T {
        progress(announcing)
        let arguments =
            [
                "--zones", "\(settings.zones)", "--records-per-zone", "\(settings.recordsPerZone)",
                "--seed", "\(settings.seed)", "--page-size", "\(settings.pageSize)", "--no-churn", "--prepare-pages",
            ] + (settings.fieldSets.map { ["--field-sets", "\($0)"] } ?? [])
        // A new server knows none of the tokens an earlier one of this name issued, and a run
        // would start from the file's, refused, rather than the pipeline's own; runs against
        // the same server go on from the tokens it rotated to.
        try? FileManager.default.removeItem(atPath: webAuthTokenFile(name))
        return try await withFakeServer(name: name, arguments: arguments + serverArguments, records: settings.zones * settings.recordsPerZone, body)
    }

    /// Runs a pipeline `bench-<name>` (schema `bench_<name>`, dropped first) against `server`
    /// from nil tokens and checks its rows. `defaults`: the pipeline leaves commitEvery and
    /// parallelZones to their defaults.
    func runPipeline(
        against server: BenchServer, name: String, label: String, settings: FakeSettings, defaults: Bool, logName: String? = nil
    ) async throws -> ProcessRun {
        let logName = logName ?? "\(name)-run"
        let records = settings.zones * settings.recordsPerZone
        let pipeline = try writePipeline(
            "bench-\(name)", schema: Self.schema(ofRun: name), defaults: defaults, source: fakeServerSource(server, name: name))
        try dropSchema(pipeline)
        progress("\(label): zonefeed run against \(server.baseURL), \(records.grouped) records in \(settings.zones) zones…")
        let run = try await NIOThreadPool.singleton.runIfActive { try runPipeline(pipeline, label: label, logName: logName, writing: records) }
        try checkLiveRows(pipeline, label: label, logName: logName, expected: records)
        return run
    }

    /// Runs `body` with a `zonefeed fake-server --port 0 <arguments>` (through
    /// swift-subprocess; its output in `<name>-server.stdout` and `.stderr`), ended with SIGTERM
    /// when `body` returns or throws. `records` tells how long it may take to get ready.
    func withFakeServer<T: Sendable>(
        name: String, arguments: [String], records: Int, _ body: (BenchServer) async throws -> T
    ) async throws -> T {
        // The server's output goes to files: nobody has to keep reading a pipe it writes to.
        let stdoutPath = path("\(name)-server.stdout")
        let stdout = try FileDescriptor.open(
            FilePath(stdoutPath), .writeOnly, options: [.create, .truncate], permissions: [.ownerReadWrite])
        defer { try? stdout.close() }
        let stderr = try FileDescriptor.open(
            FilePath(path("\(name)-server.stderr")), .writeOnly, options: [.create, .truncate], permissions: [.ownerReadWrite])
        defer { try? stderr.close() }
        let executable = ChildProcess.currentExecutable
        let result = try await Subprocess.run(
            .path(FilePath(executable.path)),
            arguments: Arguments(executablePathOverride: executable.name, remainingValues: ["fake-server", "--port", "0"] + arguments),
            environment: .custom(Dictionary(uniqueKeysWithValues: environment.map { (Environment.Key(stringLiteral: $0.key), $0.value) })),
            input: .none,
            output: .fileDescriptor(stdout, closeAfterSpawningProcess: false),
            error: .fileDescriptor(stderr, closeAfterSpawningProcess: false)
        ) { execution in
            // The server serves until the phase is over, however it ends.
            defer { try? execution.send(signal: .terminate) }
            let server = try await readyServer(in: stdoutPath, of: execution.processIdentifier.value, logName: "\(name)-server", records: records)
            return try await body(server)
        }
        return result.closureResult
    }

    /// The URL in the fake server's ready line,
    /// `fake CloudKit server listening on http://127.0.0.1:PORT (container …)`, and over TLS the
    /// CA certificate file it names, read from its stdout file as it is written.
    func readyServer(in stdoutPath: String, of pid: pid_t, logName: String, records: Int) async throws -> BenchServer {
        // The server renders its pages before it listens: a few seconds per 100,000 records.
        let timeout = 60 + records / 10_000
        let deadline = ContinuousClock.now + .seconds(timeout)
        while ContinuousClock.now < deadline {
            try checkNotInterrupted()
            let output = (try? String(contentsOfFile: stdoutPath, encoding: .utf8)) ?? ""
            if let range = output.range(of: " listening on "), let url = output[range.upperBound...].split(separator: " ").first {
                let caFile = output.range(of: "CA certificate in ").map { String(output[$0.upperBound...].prefix { $0 != "\n" }) }
                return BenchServer(baseURL: String(url), caFile: caFile)
            }
            // Gone (reaped by swift-subprocess): it will not listen.
            if kill(pid, 0) != 0 && errno == ESRCH {
                throw Failure("the fake server exited before it listened" + stderrTail(logName))
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw Failure("the fake server did not say it was listening within \(timeout) s" + stderrTail(logName))
    }

    // MARK: Runs

    struct ProcessRun: Sendable {
        var seconds: Double
        var peakRSSBytes: Int
        var userSeconds: Double
        var systemSeconds: Double
        /// What the run cost the server, from spawn to exit, when it runs on this machine.
        var server: ServerCPU.Use?
    }

    /// `zonefeed run FILE --progress never` as a child, timed from spawn to exit; its stdout
    /// and stderr go to `<logName>.stdout` and `.stderr` in the work folder.
    func runPipeline(_ pipeline: Pipeline, label: String, logName: String, writing rows: Int = 0) throws -> ProcessRun {
        try runPipelines(pipeline, count: 1, label: label, logName: { _ in logName }, writing: rows)
    }

    /// `count` runs of one pipeline started at once, timed from the first spawn to the last exit;
    /// the peak RSS is the largest of theirs, the CPU their sum. Logs in `<logName(i)>.stdout` and
    /// `.stderr`. `rows`: what the runs will write, for the memory warmed before the clock (none
    /// for a run that writes little or nothing).
    func runPipelines(_ pipeline: Pipeline, count: Int, label: String, logName: (Int) -> String, writing rows: Int = 0) throws -> ProcessRun {
        try checkNotInterrupted()
        checkpoint()
        warmUp(rows: rows)
        let before = serverCPU?.sample()
        let started = ContinuousClock.now
        let children = try (0..<count).map { i in
            try ChildProcess(
                name: count == 1 ? label : "\(label) (\(i + 1) of \(count))", executable: ChildProcess.currentExecutable,
                arguments: ["run", pipeline.filePath, "--progress", "never"], environment: environment,
                stdout: .file(path(logName(i) + ".stdout")), stderr: .file(path(logName(i) + ".stderr")))
        }
        let ends = children.map { $0.wait() }
        let seconds = (ContinuousClock.now - started).seconds
        let server = serverCPU?.use(since: before)
        peaks.note(label, bytes: ends.map(\.peakRSSBytes).max() ?? 0)
        try checkNotInterrupted()
        for (i, end) in ends.enumerated() where end.status != 0 {
            throw Failure("\(label)\(count == 1 ? "" : " (process \(i + 1))") exited with status \(end.status)" + stderrTail(logName(i)))
        }
        return ProcessRun(
            seconds: seconds, peakRSSBytes: ends.map(\.peakRSSBytes).max() ?? 0, userSeconds: ends.map(\.userSeconds).reduce(0, +),
            systemSeconds: ends.map(\.systemSeconds).reduce(0, +), server: server)
    }

    /// The records the pipeline's runs read and committed, summed over its zones
    /// (`zonefeed_checkpoints.records_applied`, which each batch adds its entries to). Not the
    /// upserts: a record applied a second time with the change tag its row has is counted
    /// unchanged, not upserted, so a zone read twice left that sum as it was.
    func recordsCommitted(of pipeline: Pipeline) throws -> Int {
        let checkpoints = "\(quoteIdentifier((try pipeline.postgresSettings()).schema)).zonefeed_checkpoints"
        return try Connection.withConnection(conninfo) { c in
            try c.query("SELECT coalesce(sum(records_applied), 0) FROM \(checkpoints) WHERE pipeline = $1 AND scope = 'zone'", [pipeline.name])
                .scalar.flatMap { Int($0) } ?? 0
        }
    }

    /// A run that lost or duplicated rows is not worth timing.
    func checkLiveRows(_ pipeline: Pipeline, label: String, logName: String, expected: Int? = nil) throws {
        let records = expected ?? self.records
        let tables = PostgresSchema(pipelineName: pipeline.name, settings: try pipeline.postgresSettings()).tables
        let sql = "SELECT " + tables.map { "(SELECT count(*) FROM \($0.liveViewName))" }.joined(separator: " + ")
        let live = try Connection.withConnection(conninfo) { c in try c.query(sql).scalar.flatMap { Int($0) } ?? 0 }
        guard live == records else {
            throw Failure(
                "\(label) left \(live.grouped) live rows in schema \((try pipeline.postgresSettings()).schema) instead of \(records.grouped), "
                    + "so its figures would mean nothing; its log is \(path(logName + ".stderr"))")
        }
    }

    /// The run over HTTP wrote the notes the in-process run wrote, field for field: the fake
    /// server drew them as the in-process source did (its field sets included), so that the
    /// two runs and the ceiling are compared on the same records.
    func checkSameNotes() throws {
        let notes = "notes"
        let mine = "\(quoteIdentifier(Self.schema(ofRun: "inprocess"))).\(quoteIdentifier(notes))"
        let theirs = "\(quoteIdentifier(Self.schema(ofRun: "http"))).\(quoteIdentifier(notes))"
        let differ = try Connection.withConnection(conninfo) { c in
            try c.query(
                "SELECT count(*) FROM \(mine) a FULL JOIN \(theirs) b USING (zone_name, record_name) "
                    + "WHERE a.record_name IS NULL OR b.record_name IS NULL OR (a.title, a.body, a.word_count, a.rating, a.place, a.tags, a.fields) "
                    + "IS DISTINCT FROM (b.title, b.body, b.word_count, b.rating, b.place, b.tags, b.fields)"
            ).scalar.flatMap { Int($0) } ?? -1
        }
        guard differ == 0 else {
            throw Failure(
                "the run over HTTP and the in-process run wrote different notes (\(differ) differ in \(notes)), so their figures are not of the same records; "
                    + "their logs are in \(work)")
        }
    }

    /// Every token was current, so the no-op runs must have read nothing: the pipeline's runs
    /// read and committed each record once in all.
    func checkNothingReapplied(_ pipeline: Pipeline) throws {
        let committed = try recordsCommitted(of: pipeline)
        guard committed == records else {
            throw Failure(
                "the no-op runs read records again (\(committed.grouped) read and committed in all, \(records.grouped) expected), so they were no no-op; their logs are noop-run-*.stderr in \(work)"
            )
        }
    }

    // MARK: Helpers

    func path(_ name: String) -> String { work + "/" + name }

    /// Writes a pipeline file into the work folder, with the demo's mapping, and loads it as a
    /// run will.
    func writePipeline(_ name: String, schema: String, defaults: Bool = false, mapping: String = Bench.recordTypes, source: String) throws -> Pipeline {
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
            \(mapping)
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

    /// The Note alone, as in `recordTypes`: the public database's phase reads one type.
    static let noteMapping =
        String(recordTypes[..<recordTypes.range(of: "  Folder:")!.lowerBound])
        + String(recordTypes[recordTypes.range(of: "unmappedFields:")!.lowerBound...])

    /// The `source:` section of a pipeline that reads a bench's fake server, with the tokens the
    /// server accepts and a token file in the work folder.
    func fakeServerSource(_ server: BenchServer, name: String) -> String {
        """
          cloudkit:
            baseURL: \(yamlString(server.baseURL))\(server.caFile.map { "\n    tls:\n      caFile: \(yamlString($0))" } ?? "")
            container: iCloud.com.example.fake
            environment: development
            database: private
            zones: all
            auth:
              apiToken: fake-api-token
              webAuthToken: fake-web-auth-token
              webAuthTokenFile: \(yamlString(webAuthTokenFile(name)))
        """
    }

    /// Where a run against a fake server keeps the tokens that server rotates to.
    func webAuthTokenFile(_ name: String) -> String { path("bench-\(name).web-auth-token") }

    /// A YAML double-quoted scalar; JSON's escapes are YAML's.
    func yamlString(_ value: String) -> String {
        JSONValue.string(value).jsonText
    }

    func dropSchema(_ pipeline: Pipeline) throws {
        try dropSchema(named: (try pipeline.postgresSettings()).schema)
    }

    func dropSchema(named schema: String) throws {
        try Connection.withConnection(conninfo) { c -> Void in
            try c.execute("DROP SCHEMA IF EXISTS \(quoteIdentifier(schema)) CASCADE")
        }
    }

    /// A phase that writes `rows` rows starts with as much backed free memory as it will write
    /// (see `MemoryWarmUp`).
    func warmUp(rows: Int) {
        MemoryWarmUp.touchAndFree(bytes: MemoryWarmUp.bytes(forRows: rows))
    }

    /// Writes the previous phase's dirty pages out now, so that they are not written on the
    /// next phase's clock. Only a superuser may; on another server the phases share that cost.
    func checkpoint() {
        _ = try? Connection.withConnection(conninfo) { c in try c.execute("CHECKPOINT") }
    }

    func checkNotInterrupted() throws {
        if interruption.isInterrupted { throw Failure("interrupted") }
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
