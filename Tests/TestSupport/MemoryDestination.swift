import CloudKitModel
import Synchronization
import ZoneFeed

/// A destination in memory, for testing the engine without PostgreSQL: the same contract as
/// `PostgresDestination` (a batch and its token together, generations, resync sweeps, zone
/// deletions, pending zones), and a log of what was applied, in order.
public actor MemoryDestination: RunDestination {
    public struct Row: Sendable, Hashable {
        public var changeTag: String?
        public var deleted: Bool
        public var generation: Int
    }

    public struct Run: Sendable {
        public var status: RunStatus
        public var error: String?
        public var throttledSeconds: Double
    }

    /// A batch as it was applied.
    public struct Applied: Sendable {
        public var zone: ZoneID
        public var token: ChangeToken
        public var recordNames: [String]
    }

    public private(set) var rows: [ZoneID: [String: Row]] = [:]
    public private(set) var checkpoints: [ZoneID: ZoneCheckpoint] = [:]
    public private(set) var runs: [Int64: Run] = [:]
    public private(set) var applied: [Applied] = []
    public private(set) var databaseToken: ChangeToken?
    private var pending: [ZoneID] = []
    private var account: String?
    private var claimed: Set<ZoneID> = []
    /// Zones another process holds: `claimZone` answers false.
    private var heldElsewhere: Set<ZoneID> = []
    /// Called after each batch is applied, with how many have been: a test stops a run here.
    private var afterBatch: (@Sendable (Int) async -> Void)?

    /// Whether it offers a spare connection for a zone's next batch, and how many batches
    /// written on one fail before they commit; how many were written on one.
    private struct Spares {
        var offered = false
        var failing = 0
        var written = 0
        var committed = 0
    }
    private nonisolated let spares = Mutex(Spares())

    public init() {}

    /// From now on a zone's next batch may be written alongside its last; the first `failing`
    /// such batches fail without committing, as one that met a deadlock would.
    public nonisolated func offerSpareConnections(failingFirst failing: Int = 0) {
        spares.withLock { $0 = Spares(offered: true, failing: failing) }
    }

    /// How many batches were written alongside the one before them, whether they committed or
    /// not, and how many of them committed.
    public nonisolated var batchesWrittenAlongside: Int { spares.withLock { $0.written } }
    public nonisolated var batchesCommittedAlongside: Int { spares.withLock { $0.committed } }

    public func onEachBatch(_ body: @escaping @Sendable (Int) async -> Void) { afterBatch = body }

    public func holdElsewhere(_ zone: ZoneID) { heldElsewhere.insert(zone) }

    public func live(_ zone: ZoneID) -> Set<String> {
        Set((rows[zone] ?? [:]).filter { !$0.value.deleted }.keys)
    }

    // MARK: Destination

    public func prepare() async throws {}

    public func startRun() async throws -> Int64 {
        let id = Int64(runs.count + 1)
        runs[id] = Run(status: .running, error: nil, throttledSeconds: 0)
        return id
    }

    public func finishRun(_ runID: Int64, status: RunStatus, error: String?, throttledSeconds: Double) async throws {
        runs[runID] = Run(status: status, error: error, throttledSeconds: throttledSeconds)
    }

    public func storedAccount() async throws -> String? { account }
    public func storeAccount(_ user: String) async throws { account = user }

    public func databaseCheckpoint() async throws -> ChangeToken? { databaseToken }

    public func applyDatabaseChanges(_ page: DatabaseChangePage, after previous: ChangeToken?, runID: Int64) async throws -> BatchOutcome? {
        guard databaseToken == previous else { return nil }
        var outcome = BatchOutcome()
        for deletion in page.deletedZones {
            if deletion.reason == .encryptedDataReset {
                _ = resync(deletion.zoneID)
                markPending(deletion.zoneID)
            } else {
                outcome += dropZone(deletion)
            }
        }
        for zone in page.modifiedZones { markPending(zone) }
        databaseToken = page.syncToken
        return outcome
    }

    public func pendingZones() async throws -> [ZoneID] { pending }

    public func markEveryZonePending() async throws {
        for zone in checkpoints.keys.sorted(by: { $0.zoneName < $1.zoneName }) { markPending(zone) }
    }

    public func claimZone(_ zone: ZoneID) async throws -> Bool {
        guard !heldElsewhere.contains(zone) else { return false }
        return claimed.insert(zone).inserted
    }

    public func releaseZone(_ zone: ZoneID) async throws { claimed.remove(zone) }

    public func zoneCheckpoint(_ zone: ZoneID) async throws -> ZoneCheckpoint {
        if let checkpoint = checkpoints[zone] { return checkpoint }
        let checkpoint = ZoneCheckpoint(token: nil, generation: 1, resyncing: false)
        checkpoints[zone] = checkpoint
        return checkpoint
    }

    public func beginResync(_ zone: ZoneID, reason: String) async throws -> ZoneCheckpoint { resync(zone) }

    public func beginSweep(_ zone: ZoneID, token: ChangeToken) async throws -> ZoneCheckpoint {
        let generation = (checkpoints[zone]?.generation ?? 0) + 1
        let checkpoint = ZoneCheckpoint(token: token, generation: generation, resyncing: true)
        checkpoints[zone] = checkpoint
        return checkpoint
    }

    public nonisolated func hasSpareConnection(for zone: ZoneID) -> Bool {
        spares.withLock { $0.offered }
    }

    public nonisolated func reserveSpareConnection(for zone: ZoneID, besides inUse: SpareConnection?) -> SpareConnection? {
        hasSpareConnection(for: zone) ? SpareConnection(id: 1) : nil
    }

    /// Waits (a thousand turns at most) for the batch before it to commit, as the PostgreSQL
    /// destination's lock does, then applies it fenced by that batch's token.
    public func apply(_ batch: ChangeBatch, on spare: SpareConnection) async throws -> BatchOutcome {
        let fails = spares.withLock { spares -> Bool in
            spares.written += 1
            guard spares.failing > 0 else { return false }
            spares.failing -= 1
            return true
        }
        if fails { throw MemoryDestinationError(message: "a batch written alongside did not commit") }
        for _ in 0..<1_000 where checkpoints[batch.zoneID]?.token != batch.follows?.token { await Task.yield() }
        let outcome = try await apply(batch)
        spares.withLock { $0.committed += 1 }
        return outcome
    }

    public func apply(_ batch: ChangeBatch) async throws -> BatchOutcome {
        if let follows = batch.follows, checkpoints[batch.zoneID]?.token != follows.token {
            throw MemoryDestinationError(message: "the zone's token is not the one of the batch before this one")
        }
        guard let checkpoint = checkpoints[batch.zoneID], checkpoint.generation == batch.generation else {
            throw MemoryDestinationError(message: "a batch of generation \(batch.generation) for a zone at another generation")
        }
        guard checkpoint.token == batch.from else {
            throw MemoryDestinationError(message: "a batch read from a token that is not the zone's checkpoint")
        }
        var outcome = BatchOutcome()
        outcome.pages = batch.pageCount
        var zoneRows = rows[batch.zoneID] ?? [:]
        for entry in batch.entries {
            switch entry {
            case .record(let record):
                if let row = zoneRows[record.recordName], record.recordChangeTag != nil, row.changeTag == record.recordChangeTag, !row.deleted,
                    row.generation == batch.generation
                {
                    outcome.unchanged += 1
                    continue
                }
                zoneRows[record.recordName] = Row(changeTag: record.recordChangeTag, deleted: false, generation: batch.generation)
                outcome.upserts += 1
            case .deleted(let name):
                zoneRows[name]?.deleted = true
                outcome.tombstones += 1
            case .error, .unreadable:
                outcome.rejects += 1
            }
        }
        for list in batch.listed {
            for name in list.names where zoneRows[name] != nil { zoneRows[name]?.generation = batch.generation }
        }
        if batch.finishesResync {
            for (name, row) in zoneRows where row.generation < batch.generation && !row.deleted {
                zoneRows[name]?.deleted = true
                outcome.swept += 1
            }
        }
        rows[batch.zoneID] = zoneRows
        checkpoints[batch.zoneID] = ZoneCheckpoint(
            token: batch.token, generation: batch.generation, resyncing: checkpoint.resyncing && !batch.finishesResync)
        if batch.isLast { pending.removeAll { $0 == batch.zoneID } }
        applied.append(Applied(zone: batch.zoneID, token: batch.token, recordNames: batch.entries.compactMap(\.recordName)))
        if let afterBatch { await afterBatch(applied.count) }
        return outcome
    }

    public func deleteZone(_ deletion: ZoneDeletion, runID: Int64) async throws -> BatchOutcome { dropZone(deletion) }

    public func recordZoneError(_ zone: ZoneID, message: String?) async throws {}

    /// Nothing is held open.
    public func close() async {}

    // MARK: What the commands ask

    /// `zonefeed status`: the checkpoints with their rows, and the runs, newest first.
    public func status(place: String) -> PipelineStatus {
        var status = PipelineStatus(place: place)
        status.tablesExist = !runs.isEmpty || !checkpoints.isEmpty
        if databaseToken != nil {
            status.zones.append(
                PipelineStatus.Zone(
                    scope: "database", zoneOwner: "", zoneName: "", hasToken: true, generation: 1, resyncing: false, pending: false,
                    recordsApplied: 0, updatedAt: "", lastError: nil, liveRows: 0, deletedRows: 0))
        }
        for (zone, checkpoint) in checkpoints.sorted(by: { $0.key.zoneName < $1.key.zoneName }) {
            let zoneRows = rows[zone] ?? [:]
            let applied = applied.filter { $0.zone == zone }.reduce(0) { $0 + $1.recordNames.count }
            status.zones.append(
                PipelineStatus.Zone(
                    scope: "zone", zoneOwner: zone.ownerRecordName, zoneName: zone.zoneName, hasToken: checkpoint.token != nil,
                    generation: checkpoint.generation, resyncing: checkpoint.resyncing, pending: pending.contains(zone),
                    recordsApplied: Int64(applied), updatedAt: "", lastError: nil,
                    liveRows: Int64(zoneRows.values.filter { !$0.deleted }.count), deletedRows: Int64(zoneRows.values.filter(\.deleted).count)))
        }
        for (id, run) in runs.sorted(by: { $0.key > $1.key }) {
            status.runs.append(
                PipelineStatus.Run(
                    runID: id, status: run.status.rawValue, startedAt: "", finishedAt: nil, pages: 0, upserts: 0, tombstones: 0, rejects: 0,
                    throttledSeconds: run.throttledSeconds, error: run.error))
        }
        return status
    }

    /// `zonefeed reset`: as PostgreSQL's, a zone claimed by a run is left alone and reported.
    public func reset(zoneNames: [String], all: Bool, addingUnknownZones: Bool) -> ResetOutcome {
        var outcome = ResetOutcome()
        let known = checkpoints.keys.sorted { $0.zoneName < $1.zoneName }
        var targets = all ? known : known.filter { zoneNames.contains($0.zoneName) }
        outcome.unknown = all ? [] : zoneNames.filter { name in !known.contains { $0.zoneName == name } }
        if addingUnknownZones {
            targets += outcome.unknown.map { ZoneID(zoneName: $0) }
            outcome.unknown = []
        }
        for zone in targets {
            guard !claimed.contains(zone), !heldElsewhere.contains(zone) else {
                outcome.busy.append(zone)
                continue
            }
            // As PostgreSQL's: the zone is pending, so that the next run fetches it even when
            // the database feed has nothing new.
            _ = resync(zone)
            markPending(zone)
            outcome.reset.append(zone)
        }
        if all { databaseToken = nil }
        return outcome
    }

    // MARK: Helpers

    private func markPending(_ zone: ZoneID) {
        if !pending.contains(zone) { pending.append(zone) }
    }

    private func resync(_ zone: ZoneID) -> ZoneCheckpoint {
        let checkpoint = ZoneCheckpoint(token: nil, generation: (checkpoints[zone]?.generation ?? 0) + 1, resyncing: true)
        checkpoints[zone] = checkpoint
        return checkpoint
    }

    /// Deleted: every row tombstoned; purged: every row gone. The checkpoint goes either way.
    private func dropZone(_ deletion: ZoneDeletion) -> BatchOutcome {
        var outcome = BatchOutcome()
        if deletion.reason == .purged {
            outcome.tombstones = rows.removeValue(forKey: deletion.zoneID)?.count ?? 0
        } else {
            for name in rows[deletion.zoneID]?.keys.map({ $0 }) ?? [] where rows[deletion.zoneID]?[name]?.deleted == false {
                rows[deletion.zoneID]?[name]?.deleted = true
                outcome.tombstones += 1
            }
        }
        checkpoints[deletion.zoneID] = nil
        pending.removeAll { $0 == deletion.zoneID }
        return outcome
    }
}

public struct MemoryDestinationError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}
