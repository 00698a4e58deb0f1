import FakeCloudKit
import Foundation
import LibPQ
import Logging
import ZoneFeed
import ZoneFeedComponents
import ZoneFeedPostgres

/// Pipelines over the fake source for tests, written as YAML so that tests go through the same
/// loader as users. Each has its own schema and name.
public struct FakePipeline: Sendable {
    public var name: String
    public var schema: String
    public var url: String
    public var fake: FakeSettings
    public var deletes = "tombstone"
    public var commitEvery = 1_000
    /// `destination.commitEveryBytes`, when not the default.
    public var commitEveryBytes: Int?
    public var parallelZones = 2
    public var onBadRecord = "reject"
    public var unknownRecordTypes = "skip"
    /// Record types to map; the default maps all three fake types.
    public var mappedTypes: [String] = FakeFeed.recordTypes
    /// When set, the pipeline reads the fake feed over HTTP from `zonefeed fake-server` at this
    /// URL with the real CloudKit client, instead of in process.
    public var serverURL: String?
    public var webAuthToken = "fake-web-auth-token"
    /// Where the rotated web auth token is kept (relative to the working directory); nil leaves
    /// it to the default, `.zonefeed/<pipeline>.web-auth-token`.
    public var webAuthTokenFile: String? = "web-auth-token"
    /// `auth.webAuthTokenStore`: `database` keeps the tokens in the destination (set
    /// `webAuthTokenFile` to nil with it).
    public var webAuthTokenStore: String?
    public var retryBudgetSeconds = 30
    /// `source.cloudkit.maxConcurrentRequests`; nil leaves the default.
    public var maxConcurrentRequests: Int?
    /// More `source.cloudkit` keys, as written (`timeoutSeconds: 3`, say).
    public var moreCloudKit: [String] = []
    /// `source.cloudkit.zones`, as written.
    public var zones = "all"
    /// When set, the pipeline reads the public database (`database: public`), its requests
    /// signed with this server-to-server key instead of a user's web auth token.
    public var serverKey: (keyID: String, privateKeyFile: String)?
    /// The whole `recordTypes:` section, written out (a schema file's, say); nil makes it from
    /// `mappedTypes`.
    public var recordTypesSection: String?
    /// Each record type's table, as the tests read them back.
    public var tables = ["Note": "notes", "Folder": "folders", "Tag": "tags"]
    /// More top-level sections, appended to the file as written (such as `watch:`).
    public var moreSections = ""

    public init(prefix: String, fake: FakeSettings) async throws {
        name = TestDatabase.uniqueName(prefix)
        schema = name
        url = try await TestDatabase.connectionString()
        self.fake = fake
    }

    /// The fields of the fake Note, one column of every type.
    public static let noteFields = """
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
              related: { column: related_notes, type: "text[]" }
        """

    public var yaml: String {
        var types = ""
        if mappedTypes.contains("Note") { types += "  Note:\n    table: notes\n    fields:\n\(Self.noteFields)\n" }
        if mappedTypes.contains("Folder") { types += "  Folder:\n    table: folders\n    fields:\n      name: text\n      color: bigint\n      parent: text\n" }
        if mappedTypes.contains("Tag") { types += "  Tag:\n    table: tags\n" }
        let auth =
            serverKey.map { key in
                "      serverKey:\n        keyID: \(key.keyID)\n        privateKeyFile: \(key.privateKeyFile)\n"
            } ?? """
                      apiToken: fake-api-token
                      webAuthToken: ${ZONEFEED_TEST_WEB_AUTH_TOKEN}
                \(webAuthTokenFile.map { "      webAuthTokenFile: \($0)\n" } ?? "")\(webAuthTokenStore.map { "      webAuthTokenStore: \($0)\n" } ?? "")
                """
        let source =
            serverURL.map { url in
                """
                  cloudkit:
                    baseURL: \(url)
                    container: iCloud.com.example.fake
                    environment: development
                \(serverKey == nil ? "    database: private\n    zones: \(zones)\n" : "    database: public\n")    resultsLimit: \(fake.pageSize)
                    retryBudgetSeconds: \(retryBudgetSeconds)
                \(maxConcurrentRequests.map { "    maxConcurrentRequests: \($0)\n" } ?? "")\(moreCloudKit.map { "    \($0)\n" }.joined())    auth:
                \(auth)
                """
            } ?? """
                  fake:
                    seed: \(fake.seed)
                    zones: \(fake.zones)
                    recordsPerZone: \(fake.recordsPerZone)
                    pageSize: \(fake.pageSize)
                \(fake.badRecordEvery.map { "    badRecordEvery: \($0)\n" } ?? "")\(fake.churn ? "" : "    churn: false\n")
                """
        return """
            pipeline: \(name)
            source:
            \(source)destination:
              url: ${ZONEFEED_TEST_URL}
              schema: \(schema)
              deletes: \(deletes)
              commitEvery: \(commitEvery)
              commitEveryBytes: \(commitEveryBytes ?? 16_777_216)
              parallelZones: \(parallelZones)
            \(recordTypesSection ?? "recordTypes:\n" + types)unmappedFields: keep
            unknownRecordTypes: \(unknownRecordTypes)
            onBadRecord: \(onBadRecord)
            \(moreSections)
            """
    }

    public var environment: [String: String] { ["ZONEFEED_TEST_URL": url, "ZONEFEED_TEST_WEB_AUTH_TOKEN": webAuthToken] }

    public func pipeline() throws -> Pipeline {
        try Pipeline.parse(yaml: yaml, filePath: "\(name).yml", components: .zonefeed, environment: environment)
    }

    /// Writes the file into `directory` and returns its path.
    public func write(to directory: URL) throws -> String {
        let path = directory.appendingPathComponent("\(name).yml").path
        try yaml.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    public func expected(hardDeletes: Bool? = nil) -> ExpectedState {
        ExpectedState(settings: fake, mappedTypes: Set(mappedTypes), hardDeletes: hardDeletes ?? (deletes == "hard"))
    }

    /// One run in this process, as `zonefeed run` does it.
    @discardableResult
    public func run(zones: [String] = [], events: @escaping SyncEventHandler = { _ in }) async throws -> RunSummary {
        let pipeline = try pipeline()
        let logger = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
        let destination = try PostgresDestination(pipeline: pipeline, conninfo: url, logger: logger)
        let runner = Runner(
            configuration: .init(
                pipeline: pipeline.name, commitEvery: pipeline.destination.commitEvery,
                commitEveryBytes: pipeline.destination.commitEveryBytes, zoneFilter: zones,
                parallelZones: pipeline.destination.parallelZones),
            source: FakeSource(settings: fake), destination: destination, logger: logger, events: events)
        do {
            let summary = try await runner.run()
            await destination.close()
            return summary
        } catch {
            await destination.close()
            throw error
        }
    }

    /// Creates the pipeline's tables, as a run's start does, and nothing else.
    public func prepare() async throws {
        try await withPreparedDestination { _ in }
    }

    /// `zonefeed reset` in this process.
    public func reset(zones: [String] = [], all: Bool = false) async throws {
        try await withPreparedDestination { _ = try await $0.reset(zoneNames: zones, all: all) }
    }

    /// The pipeline's destination, its tables prepared, closed on every path.
    private func withPreparedDestination(_ body: (PostgresDestination) async throws -> Void) async throws {
        let destination = try PostgresDestination(pipeline: try pipeline(), conninfo: url, logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() })
        do {
            try await destination.prepare()
            try await body(destination)
        } catch {
            await destination.close()
            throw error
        }
        await destination.close()
    }

    /// The records the checkpoints say were applied so far, over every run; 0 before the first.
    public func recordsApplied() async throws -> Int {
        let pipeline = self
        return try await Connection.withConnectionOffPool(url) { c in try pipeline.recordsApplied(on: c) }
    }

    func recordsApplied(on c: Connection) throws -> Int {
        let exists = try c.query("SELECT to_regclass($1) IS NOT NULL", ["\(schema).zonefeed_checkpoints"]).scalar == "t"
        guard exists else { return 0 }
        return Int(try c.query("SELECT coalesce(sum(records_applied), 0) FROM \(quoteIdentifier(schema)).zonefeed_checkpoints").scalar ?? "0") ?? 0
    }

    /// Polls the checkpoints until more records are applied than `beyond` (or the process ends,
    /// or two minutes pass), and returns the count seen last.
    public func waitForProgress(beyond: Int = 0, while running: ZonefeedBinary.Running) async -> Int {
        let pipeline = self
        return await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: pipeline.pollProgress(beyond: beyond, while: running)) }
        }
    }

    /// Kills `running` (SIGKILL) `delay` after its checkpoints first show more records applied
    /// than `beyond`, or once it has ended, or at the latest two minutes after the call (a run
    /// that shows no progress by then is killed anyway, and the test's own checks say why).
    public func kill(_ running: ZonefeedBinary.Running, afterProgressBeyond beyond: Int, delay: Duration) {
        let pipeline = self
        Thread.detachNewThread {
            _ = pipeline.pollProgress(beyond: beyond, while: running)
            running.kill(blockingFor: delay)
        }
    }

    /// Kills `running` (SIGKILL) `delay` after `query` (one boolean, read from the pipeline's
    /// database) first answers true, or once it has ended, or two minutes after the call.
    public func kill(_ running: ZonefeedBinary.Running, when query: String, delay: Duration) {
        let url = self.url
        Thread.detachNewThread {
            let deadline = ContinuousClock.now + .seconds(120)
            if let c = try? Connection(url) {
                while running.isRunning, ContinuousClock.now < deadline, (try? c.query(query).scalar) != "t" {
                    Thread.sleep(forTimeInterval: 0.01)
                }
                c.close()
            }
            running.kill(blockingFor: delay)
        }
    }

    /// The records applied, looked at every 10 ms until more than `beyond` or `running` has
    /// ended or two minutes have passed; on the calling thread, which must be one of the
    /// caller's own: from a test's task on a loaded machine, the cooperative pool can be held for
    /// seconds by other tests' work, long enough for a run to end unseen. One connection for
    /// every look: opening one a look would add its set-up to the moment seen.
    private func pollProgress(beyond: Int, while running: ZonefeedBinary.Running) -> Int {
        let deadline = ContinuousClock.now + .seconds(120)
        // A connection refused (the server busy past its limit) is tried again: given up on at
        // once, the caller's kill came at the run's start, and was counted as one mid-work.
        var connection = try? Connection(url)
        while connection == nil, running.isRunning, ContinuousClock.now < deadline {
            Thread.sleep(forTimeInterval: 0.01)
            connection = try? Connection(url)
        }
        guard let c = connection else { return beyond }
        defer { c.close() }
        var applied = beyond
        while running.isRunning, ContinuousClock.now < deadline {
            applied = (try? recordsApplied(on: c)) ?? applied
            if applied > beyond { break }
            Thread.sleep(forTimeInterval: 0.01)
        }
        return applied
    }

    /// The most sessions seen holding this pipeline's zone locks at one moment while any of
    /// `running` runs (a backend holding zone locks is a process when each has one connection),
    /// or until `enough` are seen, polled every 5 ms on a thread of its own: polled from a test's task on a loaded machine,
    /// the looks can be seconds apart and miss an overlap that happened.
    public func mostZoneHolders(
        while running: [ZonefeedBinary.Running], until enough: Int = .max, within limit: Duration = .seconds(300)
    ) async -> (most: Int, timedOut: Bool) {
        let (url, name) = (url, name)
        return await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                var most = 0
                let deadline = ContinuousClock.now + limit
                let c = try? Connection(url)
                while running.contains(where: \.isRunning), most < enough, ContinuousClock.now < deadline {
                    // A zone's claim is this pipeline's sessions' one lock of a 64-bit key held
                    // for a session (objsubid 1), which a batch's lock of its transaction is too,
                    // held only by a session with a zone; a run's lock is of two keys (2).
                    let holders = try? c?.query(
                        """
                        SELECT count(DISTINCT l.pid) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                        WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted AND a.application_name = $1
                        """, ["zonefeed/\(name)"]
                    ).scalar.flatMap { Int($0) }
                    most = max(most, holders ?? 0)
                    Thread.sleep(forTimeInterval: 0.005)
                }
                c?.close()
                continuation.resume(returning: (most, running.contains(where: \.isRunning)))
            }
        }
    }

    /// A killed client's session ends when the server notices; until then it still holds its
    /// zones. Throws when some are left after a minute: the next run would find its zones held.
    public func waitForSessionsToEnd() async throws {
        var count: String?
        for _ in 0..<600 {
            let name = name
            count = try await Connection.withConnectionOffPool(url) { c in
                try c.query("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", ["zonefeed/\(name)"]).scalar
            }
            if count == "0" { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw SessionsLeft(description: "\(count ?? "?") sessions of pipeline \(name) were still open a minute after its process ended")
    }

    public struct SessionsLeft: Error, CustomStringConvertible {
        public var description: String
    }
}
