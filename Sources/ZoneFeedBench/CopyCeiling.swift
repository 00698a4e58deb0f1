import CloudKitModel
import Foundation
import LibPQ
import Synchronization
import ZoneFeed
import ZoneFeedPostgres

/// What PostgreSQL itself can ingest, for `zonefeed bench`: a pipeline's rows written by a plain
/// binary `COPY … FROM STDIN` into tables of the same shape and indexes as the pipeline's
/// (`LIKE … INCLUDING ALL`), from rows encoded in memory before the clock starts, in the same
/// session settings as a run's and one transaction per `rowsPerTransaction` rows.
public struct CopyCeiling {
    public let schema: PostgresSchema
    public let conninfo: String
    public var rowsPerTransaction = 5_000
    /// The server's CPU during the copies, when it runs on this machine.
    var serverCPU: ServerCPU?
    /// Called once the rows are encoded, just before the clock starts.
    var beforeTheClock: (() -> Void)?

    /// The pipeline's tables must exist (a run's `prepare`, or `createTables`).
    public init(schema: PostgresSchema, conninfo: String) {
        self.schema = schema
        self.conninfo = conninfo
    }

    public struct Measurement: Sendable {
        public var rows: Int
        public var bytes: Int
        public var seconds: Double
        /// How many connections copied at once.
        public var sessions: Int
        /// The round it was measured in, beside that round's runs; nil for the one measured once
        /// before the rounds (at one session).
        public var round: Int?
        /// What the copies cost the server, when it runs on this machine.
        var server: ServerCPU.Use?
        public var rowsPerSecond: Double { seconds > 0 ? Double(rows) / seconds : 0 }
        public var bytesPerRow: Double { rows > 0 ? Double(bytes) / Double(rows) : 0 }
        public var megabytesPerSecond: Double { seconds > 0 ? Double(bytes) / 1e6 / seconds : 0 }
    }

    /// The encoded rows of one transaction, per table.
    private struct Chunk {
        var streams: [[UInt8]?]
    }

    /// The table `<table>_ceiling` beside each of the pipeline's tables.
    func ceilingName(_ table: PostgresSchema.Table) -> String {
        "\(quoteIdentifier(schema.schema)).\(quoteIdentifier(table.mapping.table + "_ceiling"))"
    }

    /// Encodes the records as a run would write them into an empty table (every record once),
    /// then copies them on `sessions` connections at once and returns how long the copies took. `records` hands out the records
    /// in the order to write them, one zone at a time, nil at the end. Records of unmapped types
    /// or that do not fit are left out, as a run would reject or skip them.
    public func measure(
        sessions: Int = 1, zone: (Int) -> ZoneID, records next: () -> (zone: Int, records: [Record])?
    ) throws -> Measurement {
        var encoders = schema.tables.map {
            RowEncoder(mapping: $0.mapping, keepUnmapped: schema.settings.policies.unmappedFields == .keep)
        }
        var chunks: [Chunk] = []
        var rows = 0
        var bytes = 0
        var pending = 0
        var currentZone: Int?
        func closeChunk() {
            guard pending > 0 else { return }
            var chunk = Chunk(streams: [])
            for t in encoders.indices {
                chunk.streams.append(encoders[t].rowCount > 0 ? encoders[t].finish() : nil)
                bytes += chunk.streams[t]?.count ?? 0
            }
            chunks.append(chunk)
            pending = 0
        }
        func begin(_ z: Int) {
            for t in encoders.indices { encoders[t].beginDirectRows(zone: zone(z), runID: 1, generation: 1) }
        }
        while let (z, records) = next() {
            if currentZone != z {
                closeChunk()
                begin(z)
                currentZone = z
            }
            for record in records {
                guard let t = schema.table(forRecordType: record.recordType) else { continue }
                if encoders[t].append(record, seq: 0) == nil {
                    rows += 1
                    pending += 1
                }
                if pending >= rowsPerTransaction {
                    closeChunk()
                    begin(z)
                }
            }
        }
        closeChunk()

        let sessions = max(1, sessions)
        let connections = try (0..<sessions).map { _ in try Connection(conninfo) }
        defer { for c in connections { c.close() } }
        for c in connections { try c.execute("SET synchronous_commit = off; SET client_encoding = 'UTF8'") }
        for table in schema.tables {
            try connections[0].execute("DROP TABLE IF EXISTS \(ceilingName(table))")
            try connections[0].execute("CREATE TABLE \(ceilingName(table)) (LIKE \(table.qualifiedName) INCLUDING ALL)")
        }
        let copies = schema.tables.map { table in
            "COPY \(ceilingName(table)) (\(PostgresSchema.directColumns(table.mapping).joined(separator: ", "))) FROM STDIN (FORMAT binary)"
        }
        // Session i copies chunks i, i + sessions, …: each its own transactions, all at once, as
        // a run's connections write their zones' batches.
        let failures = Failures()
        let prepared = chunks
        beforeTheClock?()
        let before = serverCPU?.sample()
        let started = ContinuousClock.now
        // A thread each, not `concurrentPerform`: that runs no more at once than there are
        // cores, so a ceiling of three sessions on two cores copied two at a time, where a run
        // writes on its three connections at once.
        let copied = DispatchGroup()
        for session in 0..<sessions {
            copied.enter()
            let c = connections[session]
            Thread {
                defer { copied.leave() }
                do {
                    for chunk in stride(from: session, to: prepared.count, by: sessions).map({ prepared[$0] }) {
                        try c.transaction {
                            for (t, stream) in chunk.streams.enumerated() {
                                guard let stream else { continue }
                                try c.copyIn(copies[t]) { try $0.write(stream) }
                            }
                        }
                    }
                } catch {
                    failures.add(error)
                }
            }.start()
        }
        copied.wait()
        let seconds = (ContinuousClock.now - started).seconds
        let server = serverCPU?.use(since: before)
        if let failure = failures.first { throw failure }
        var measurement = Measurement(rows: rows, bytes: bytes, seconds: seconds, sessions: sessions)
        measurement.server = server
        return measurement
    }

    /// Creates the pipeline's tables, as a run's `prepare` does.
    public func createTables() throws {
        try Connection.withConnection(conninfo) { c in
            for statement in schema.ddl { try c.execute(statement) }
        }
    }

    /// Drops the `_ceiling` tables.
    public func dropTables() throws {
        try Connection.withConnection(conninfo) { c in
            for table in schema.tables { try c.execute("DROP TABLE IF EXISTS \(ceilingName(table))") }
        }
    }
}

/// The errors of sessions copying at once.
private final class Failures: Sendable {
    private let errors = Mutex<[any Error]>([])

    func add(_ error: any Error) { errors.withLock { $0.append(error) } }
    var first: (any Error)? { errors.withLock { $0.first } }
}
