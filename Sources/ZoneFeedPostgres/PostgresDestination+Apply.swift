import CloudKitModel
import Foundation
import LibPQ
import ZoneFeed

extension PostgresDestination {
    /// Applies a batch and its token in one transaction: upserts (COPY into staging, one merge per
    /// table), deletions, rejects, the resync sweep when the batch ends one, the checkpoint and
    /// the run's counters, and, when the schema evolves, the tables and columns the batch needs.
    /// Either all of it commits or none of it.
    public func apply(_ batch: ChangeBatch) async throws -> BatchOutcome {
        let index = state.withLock { state -> Int in
            let index = state.sessionOfZone[batch.zoneID] ?? 0
            state.batchesOnSession[index] += 1
            return index
        }
        return try await apply(batch, onSession: index, alongside: false)
    }

    /// A session that holds no other zone and has no batch to apply, other than the one the
    /// zone's last batch is on (`inUse`, its own when nil): a zone alone on the destination (a
    /// backfill of one zone, the last zone of a run) writes its next batch there while its last
    /// one is written. The session in use is named, not looked up: a batch just started may not
    /// have been counted on its session yet.
    public func reserveSpareConnection(for zone: ZoneID, besides inUse: SpareConnection?) -> SpareConnection? {
        state.withLock { state in
            guard let index = Self.spareSession(for: zone, besides: inUse?.id, in: state) else { return nil }
            state.batchesOnSession[index] += 1
            return SpareConnection(id: index)
        }
    }

    public func hasSpareConnection(for zone: ZoneID) -> Bool {
        state.withLock { Self.spareSession(for: zone, besides: nil, in: $0) != nil }
    }

    /// The index of a session that holds no zone but `zone` and applies nothing, other than
    /// `busy` (the zone's own session when nil).
    private static func spareSession(for zone: ZoneID, besides busy: Int?, in state: State) -> Int? {
        guard let own = state.sessionOfZone[zone] else { return nil }
        let busy = busy ?? own
        let held = Set(state.sessionOfZone.compactMap { $0.key == zone ? nil : $0.value })
        return state.batchesOnSession.indices.first { $0 != busy && state.batchesOnSession[$0] == 0 && !held.contains($0) }
    }

    /// Applies a batch that follows another on a spare session (connected first if new). It waits
    /// for the batch before it only at its end, to move the checkpoint: until then the two
    /// sessions write at once.
    public func apply(_ batch: ChangeBatch, on spare: SpareConnection) async throws -> BatchOutcome {
        try await apply(batch, onSession: spare.id, alongside: true)
    }

    /// `alongside`: the batch before it may still be in flight. Such a batch changes no table
    /// and is not applied again here after a deadlock: it fails, and the runner applies it again
    /// once the batch before it has committed.
    private func apply(_ batch: ChangeBatch, onSession index: Int, alongside: Bool) async throws -> BatchOutcome {
        defer { state.withLock { $0.batchesOnSession[index] -= 1 } }
        return try await on(sessions[index], opening: alongside) { c, session in
            var growth: SchemaGrowth?
            var deadlocks = 0
            var lockWaits = 0
            while true {
                do {
                    var committed = false
                    defer { session.transactionEnded(committed: committed) }
                    let (outcome, schema, changes) = try c.transaction { [growth] in
                        try self.applyBatch(batch, growing: growth, alongside: alongside, session: session, on: c)
                    }
                    committed = true
                    self.publish(schema)
                    self.logShapeChanges(changes, runID: batch.runID)
                    // A zone whose feed is drained is merged from then on (`watch` brings it
                    // more later), and the names of its copies are let go.
                    if batch.isLast { self.stopCopyingDirectly(batch.zoneID, table: nil) }
                    return outcome
                } catch let conflict as DirectCopyConflict {
                    // The batch meets rows already in a table, or a record named as one that
                    // was copied into another: it is applied again, whole, merging, and so is
                    // every later batch of the zone. The zone is merged from then on, so this
                    // ends.
                    self.stopCopyingDirectly(batch.zoneID, table: conflict.table)
                } catch let more as SchemaGrowth where alongside {
                    throw SyncError(
                        .failed,
                        message: "a batch of zone \(batch.zoneID.zoneName) brought \(more.summary), and is applied again after the batch before it")
                } catch let more as SchemaGrowth {
                    // The batch brought record types or fields the tables lack: it is applied
                    // again, whole, after the changes, in the same transaction. Each retry
                    // adds what the last one met, so this ends; one that met nothing new
                    // would go round for ever, and stops.
                    var all = growth ?? SchemaGrowth(zoneName: more.zoneName)
                    guard all.merge(more) else {
                        throw SyncError(
                            .failed,
                            message: "the tables could not be grown for what a batch of zone \(batch.zoneID.zoneName) brought "
                                + "(\(more.summary)); nothing of the batch was applied (set schemaEvolution: freeze to keep such fields "
                                + "in the fields column, and report this)")
                    }
                    growth = all
                } catch let error as PostgresError where error.sqlState == "40P01" && deadlocks < 3 && !alongside {
                    // > deadlock_detected: 40P01. A batch that alters a table while another
                    // writes to it can meet it the other way round; one of the two is rolled
                    // back, and applied again.
                    deadlocks += 1
                } catch let error as PostgresError where error.sqlState == "55P03" && growth != nil && lockWaits < 3 {
                    // > lock_not_available: 55P03. A change of shape waited its lock_timeout for
                    // the table's readers (a long query); it is tried again, then left to the
                    // next run, which resumes from this batch.
                    lockWaits += 1
                } catch let error as PostgresError where error.sqlState == "55P03" && growth != nil {
                    // The zone fails; the others go on, and the next run tries again.
                    throw SyncError(
                        .failed,
                        message: "a batch of zone \(batch.zoneID.zoneName) needs a new column or table (\(growth?.summary ?? "")), but the table "
                            + "stayed busy: waited \(Self.evolutionLockTimeout) for the table \(lockWaits + 1) times: a long query holds it; "
                            + "nothing of the batch was applied, and the next run tries again")
                } catch let error as PostgresError {
                    throw error.withContext("applying a batch of zone \(batch.zoneID.zoneName)")
                }
            }
        }
    }

    /// The transaction-scoped advisory lock of the zone's batch `sequence` in `batch`'s run: each
    /// batch holds its own from its start, and a batch that follows it waits for it there
    /// (`shared`) before it reads rows or moves the checkpoint.
    private func lockBatch(_ sequence: Int, of batch: ChangeBatch, shared: Bool, on c: Connection) throws {
        // The owner's length first, as the zone's claim does: owner `a/b` with zone `c` and owner
        // `a` with zone `b/c` are two zones, whose batches need not wait for each other.
        let owner = batch.zoneID.ownerRecordName
        let key = "\(key)/\(owner.utf8.count):\(owner)/\(batch.zoneID.zoneName)#\(batch.runID).\(sequence)"
        try c.query("SELECT pg_advisory_xact_lock\(shared ? "_shared" : "")(hashtextextended($1, 0))", [key])
    }

    /// A copy straight into a table met a row that is already there (or the batch holds a
    /// record twice); the transaction is rolled back and the batch applied by merging.
    private struct DirectCopyConflict: Error {
        /// The table whose copy met a row; nil when the zone as a whole is merged from now on.
        var table: String?
    }

    /// Copying rows straight into a table costs PostgreSQL about half of what a staging table and
    /// a merge cost, and gives the same rows when none of them is there yet: the case of a
    /// backfill. A zone is copied so while none of its tables held a row of it when this run
    /// first applied it (asked once per zone and table in a run), and until a copy meets a row
    /// already there (the copy fails as a whole), or a record named as one copied into another
    /// table (`DirectNames`): its batches are merged from then on. The zone's tables go
    /// together, so that a merge can look for a record's name in all of them.
    func copiesDirectly(_ zone: ZoneID, in schema: PostgresSchema, on c: Connection) throws -> (direct: Bool, epoch: Int) {
        let zoneState = state(of: zone)
        var known = zoneState.copiesDirectly
        var holding: Set<String> = []
        var asked = false
        for table in schema.tables where known[table.mapping.table] == nil {
            let any = try c.query(
                "SELECT EXISTS (SELECT 1 FROM \(table.qualifiedName) WHERE zone_owner = $1 AND zone_name = $2)",
                [zone.ownerRecordName, zone.zoneName])
            let holds = try any.scalar(as: Bool.self)
            known[table.mapping.table] = !holds
            if holds { holding.insert(table.mapping.table) }
            asked = true
        }
        // Only what was asked is added: a batch of the zone written alongside may have turned a
        // table over to merging meanwhile.
        if asked {
            updateState(of: zone) { [known, holding] in
                $0.copiesDirectly.merge(known) { current, _ in current }
                $0.mayHoldRows.formUnion(holding)
            }
        }
        // A name's entry in `DirectNames` has room for this many tables.
        guard schema.tables.count < 0xFFFF else { return (false, zoneState.directEpoch) }
        return (schema.tables.allSatisfy { known[$0.mapping.table]! }, zoneState.directEpoch)
    }

    /// The zone is merged from now on (`table`: the one whose copy met a row, if any), and the
    /// names of its copies are let go.
    func stopCopyingDirectly(_ zone: ZoneID, table: String?) {
        state.withLock { state in
            var zoneState = state.zones[zone] ?? ZoneState()
            zoneState.copiesDirectly = zoneState.copiesDirectly.mapValues { _ in false }
            if let table { zoneState.copiesDirectly[table] = false }
            zoneState.directEpoch += 1
            state.zones[zone] = zoneState
            if let names = state.directNames.removeValue(forKey: zone) { state.directNameCount -= names.count }
        }
    }

    /// Adds the names of a batch copied straight into the zone's tables to those of the batches
    /// before it (none with a single table: nothing is noted, nor held against the limit);
    /// throws `DirectCopyConflict` when one was copied into another table, when holding them
    /// would pass `limits.directNames`, when the zone stopped being copied so since the batch
    /// chose to (`epoch`), or when the schema has grown past one table since batches were
    /// copied without their names.
    private func noteDirectNames(_ entries: [UInt64], of zone: ZoneID, in schema: PostgresSchema, epoch: Int) throws {
        let clash = state.withLock { state -> Int? in
            let zoneState = state.zones[zone] ?? ZoneState()
            guard zoneState.directEpoch == epoch else { return 0 }
            guard schema.tables.count > 1 else {
                state.zones[zone, default: ZoneState()].copiedWithoutNames = true
                return nil
            }
            guard !zoneState.copiedWithoutNames, state.directNameCount + entries.count <= limits.directNames else { return 0 }
            var names = state.directNames.removeValue(forKey: zone) ?? DirectNames()
            state.directNameCount -= names.count
            let clash = names.add(entries)
            state.directNameCount += names.count
            state.directNames[zone] = names
            return clash
        }
        if let clash { throw DirectCopyConflict(table: schema.tables.indices.contains(clash) ? schema.tables[clash].mapping.table : nil) }
    }

    private struct Deletion {
        var seq: Int32
        var recordName: String
        /// The type of the name's last applied upsert before it in the batch: the row it deletes.
        var recordType: String?
        /// The type of the name's first applied upsert after it, for a deletion with nothing before
        /// it in the batch whose row from before is not found another way (a record deleted and
        /// made again under its type, or never seen).
        var laterType: String?
        var final = false
    }

    private struct Reject {
        var seq: Int
        var entry: RecordEntry
        var recordType: String?
        var error: String
    }

    /// A batch's entries sorted for writing, in feed order: each table's upserts, the deletions,
    /// and the rejects found so far. The last change of a record in the batch decides its final
    /// state; every change is still counted and logged.
    private struct SortedBatch {
        /// One table's share of the batch.
        struct TableRows {
            /// Positions of the table's records in the batch.
            var positions: [Int] = []
            /// Whether a record may come more than once: the merge then keeps its last version.
            var names: RecordNameRepeats?
            var repeatsARecord: Bool { names?.found ?? false }
        }

        var tables: [TableRows]
        /// When the batch is copied straight into its tables: each record's `DirectNames` entry.
        var directNames: [UInt64] = []
        var deletions: [Deletion] = []
        var rejects: [Reject] = []
        var skipped = 0
    }

    /// Rows are sent to PostgreSQL in pieces of about this size while the rest are encoded, so
    /// that the server ingests while the client encodes.
    static let copyChunkBytes = 256 * 1024

    /// The steps of one batch, in its transaction, on the tables as they are (grown first by
    /// `growth` when a try before found it), which are returned with the changes made.
    private func applyBatch(
        _ batch: ChangeBatch, growing growth: SchemaGrowth?, alongside: Bool, session: Session, on c: Connection
    ) throws -> (BatchOutcome, PostgresSchema, [SchemaChange]) {
        var schema = self.schema
        var changes: [SchemaChange] = []
        try lockBatch(batch.sequence, of: batch, shared: false, on: c)
        // A batch that follows another waits for it to end before it reads rows: at READ
        // COMMITTED a statement neither sees nor waits for rows the other inserted and has not
        // committed, so a deletion would miss them. Its COPY and merge, which do wait for such
        // rows, go on meanwhile. The wait is a lock the server sees, so that a deadlock between
        // the two is found and broken.
        var waitedForTheBatchBefore = batch.follows == nil
        func waitForTheBatchBefore() throws {
            guard !waitedForTheBatchBefore, let follows = batch.follows else { return }
            try lockBatch(follows.sequence, of: batch, shared: true, on: c)
            waitedForTheBatchBefore = true
        }
        if let growth {
            (schema, changes) = try evolve(by: growth, runID: batch.runID, on: c)
        } else {
            schema = try refreshed(schema, on: c)
        }
        try ready(session, for: schema, on: c)
        let (direct, epoch) = try copiesDirectly(batch.zoneID, in: schema, on: c)
        var sorted = try sort(batch, in: schema, noting: direct && schema.tables.count > 1)
        if direct { try noteDirectNames(sorted.directNames, of: batch.zoneID, in: schema, epoch: epoch) }
        let written = Set(schema.tables.indices.lazy.filter { !sorted.tables[$0].positions.isEmpty }.map { schema.tables[$0].mapping.table })
        if !written.isSubset(of: state(of: batch.zoneID).mayHoldRows) { updateState(of: batch.zoneID) { $0.mayHoldRows.formUnion(written) } }
        var outcome = BatchOutcome()
        outcome.pages = batch.pageCount
        outcome.skipped = sorted.skipped
        outcome.tombstones = sorted.deletions.count
        let applied = try copyUpserts(
            of: batch, sorted: &sorted, schema: schema, direct: direct, session: session, outcome: &outcome,
            beforeReadingRows: waitForTheBatchBefore, on: c)
        sorted.rejects.sort { $0.seq < $1.seq }
        outcome.rejects = sorted.rejects.count
        try waitForTheBatchBefore()
        // The batch before this one, written alongside, may have grown the tables (a record
        // type or field it met first) after this one read them, which at READ COMMITTED it did
        // not see: with the tables it read, its deletions missed a row in the new table, and
        // its merge left a new column at the older version. It is applied again after that one.
        // (Only written alongside: applied again after it, the batch before has committed, and
        // the tables are read after it.)
        if alongside, settings.evolves, try refreshed(schema, on: c).version != schema.version {
            throw SyncError(
                .failed,
                message: "the tables grew while a batch of zone \(batch.zoneID.zoneName) was written alongside the one before it, "
                    + "and it is applied again after that one")
        }
        // A batch before this one, written alongside, may have stopped the zone being copied
        // directly after this one chose to (it met a name this one copied into another table):
        // its merge could not see this batch's rows, so this one is applied again, merging,
        // now that it has committed.
        if direct, state(of: batch.zoneID).directEpoch != epoch { throw DirectCopyConflict(table: nil) }
        if !sorted.deletions.isEmpty { try stageDeletions(&sorted.deletions, of: batch, applied: applied, on: c) }
        if !direct {
            outcome.tombstones += try deleteOtherTypes(of: sorted, in: batch, schema: schema, deletionsStaged: !sorted.deletions.isEmpty, on: c)
        }
        if !sorted.deletions.isEmpty { try applyDeletions(of: batch, schema: schema, on: c) }
        try record(sorted.rejects, of: batch, on: c)
        if !sorted.rejects.isEmpty { try keepRejected(sorted.rejects, of: batch, schema: schema, on: c) }
        if !batch.listed.isEmpty { try keepListed(batch, schema: schema, on: c) }
        if batch.finishesResync {
            outcome.swept = try sweep(batch.zoneID, schema: schema, generation: batch.generation, runID: batch.runID, on: c)
        }
        try moveCheckpoint(past: batch, on: c)
        try addToRun(outcome, on: c)
        return (outcome, schema, changes)
    }

    /// The entries by table (records of unmapped types skipped or rejected), the deletions, and
    /// the errors the server reported for records. When the schema evolves, a record type
    /// without a table is thrown as growth instead.
    private func sort(_ batch: ChangeBatch, in schema: PostgresSchema, noting direct: Bool) throws -> SortedBatch {
        let entries = batch.entries
        var sorted = SortedBatch(tables: Array(repeating: SortedBatch.TableRows(), count: schema.tables.count))
        if direct { sorted.directNames.reserveCapacity(entries.count) }
        var growth = SchemaGrowth(zoneName: batch.zoneID.zoneName)
        let nameRoom = Self.nameRoom(in: batch.zoneID)
        // The tables of the types met so far, looked through before the schema's dictionary: a
        // batch has a few types, each a short String that compares at once, where hashing
        // each record's type for the lookup was a third of sorting (perf).
        var known: [(recordType: String, table: Int)] = []
        func table(forRecordType recordType: String) -> Int? {
            for k in known where k.recordType == recordType { return k.table }
            guard let t = schema.table(forRecordType: recordType) else { return nil }
            if known.count < 8 { known.append((recordType, t)) }
            return t
        }
        // By index: `enumerated()` hands out a copy of every entry, a retain and a release of
        // each of its names and buffers (2% of a run over HTTP in a perf profile).
        for i in entries.indices {
            // A record of a mapped type, the common case: its type and name are all it takes
            // (the whole record copied out of the array was 1% of a run over HTTP, perf).
            if let (recordType, recordName) = entries[i].liveRecordTypeAndName, recordName.utf8.count <= nameRoom,
                let t = table(forRecordType: recordType)
            {
                if sorted.tables[t].positions.isEmpty {
                    sorted.tables[t].positions.reserveCapacity(entries.count)
                    sorted.tables[t].names = RecordNameRepeats(capacity: entries.count, hash: nameHash)
                }
                var name = recordName
                let hash = name.withUTF8 { nameHash($0) }
                sorted.tables[t].positions.append(i)
                sorted.tables[t].names!.insert(hash: hash)
                if direct { sorted.directNames.append(DirectNames.entry(hash: hash, table: t)) }
                continue
            }
            switch entries[i] {
            case .record(let record) where table(forRecordType: record.recordType) != nil:
                // Of a mapped type, with a name longer than a row's can be.
                let problem = Self.nameTooLong(record.recordName, in: batch.zoneID, what: "the record's name")
                if settings.policies.onBadRecord == .fail { throw Self.badRecord(InertText.quoted(record.recordName), in: batch.zoneID, problem) }
                sorted.rejects.append(Reject(seq: i, entry: entries[i], recordType: record.recordType, error: problem))
            case .record(let record):
                // Of a type without a table.
                if settings.skippedRecordTypes.contains(record.recordType) {
                    sorted.skipped += 1
                } else if settings.evolves && !record.recordType.isEmpty && !record.recordType.containsNUL {
                    let tables = schema.tables.count + growth.recordTypes.count
                    if tables < limits.tables || growth.recordTypes.contains(record.recordType) {
                        growth.add(record)
                        continue
                    }
                    sorted.rejects.append(
                        Reject(
                            seq: i, entry: entries[i], recordType: record.recordType,
                            error: "record type \(InertText.quoted(record.recordType)) gets no table: evolution makes none past a pipeline's "
                                + "\(limits.tables.grouped)th, and this one has \(tables.grouped) with those "
                                + "its batch makes (a mapping written out, or a schema file, can name more)"))
                } else if settings.policies.unknownRecordTypes == .skip {
                    sorted.skipped += 1
                } else {
                    sorted.rejects.append(
                        Reject(
                            seq: i, entry: entries[i], recordType: record.recordType,
                            error: "record type \(record.recordType) is not mapped (unknownRecordTypes: reject)"))
                }
            case .deleted(let name) where name.containsNUL:
                // No row can have such a name (the record was refused when it came), so there is
                // nothing to delete; said in the rejects rather than lost.
                sorted.rejects.append(
                    Reject(
                        seq: i, entry: entries[i], recordType: nil,
                        error: "the deleted record's name contains a NUL byte, which PostgreSQL text cannot hold; no row has it"))
            case .deleted(let name) where name.utf8.count > nameRoom:
                // No row can have it either.
                let problem = Self.nameTooLong(name, in: batch.zoneID, what: "the deleted record's name")
                sorted.rejects.append(Reject(seq: i, entry: entries[i], recordType: nil, error: problem + "; no row has it"))
            case .deleted(let name):
                sorted.deletions.append(Deletion(seq: Int32(i), recordName: name))
            case .unreadable(let unreadable):
                let problem = "the entry cannot be taken as sent: \(unreadable.problem)"
                if settings.policies.onBadRecord == .fail { throw Self.badRecord(unreadable.recordName ?? "(no name)", in: batch.zoneID, problem) }
                sorted.rejects.append(Reject(seq: i, entry: entries[i], recordType: unreadable.recordType, error: problem))
            case .error(let error):
                sorted.rejects.append(
                    Reject(
                        seq: i, entry: entries[i], recordType: nil,
                        error: "the server reported \(error.serverErrorCode) for this record: \(error.reason ?? "no reason given")"))
            }
        }
        if !growth.isEmpty { throw growth }
        return sorted
    }

    /// The error that stops a batch, with `onBadRecord: fail`, at a record it cannot apply.
    static func badRecord(_ record: String, in zone: ZoneID, _ problem: String) -> SyncError {
        SyncError(
            .failed,
            message: "record \(record) in zone \(zone.zoneName) cannot be applied: \(problem); nothing of its batch was applied "
                + "(set onBadRecord: reject to send such records to zonefeed_rejects instead)")
    }

    /// The most bytes a row's key takes together (`zone_owner`, `zone_name`, `record_name`): an
    /// entry of a b-tree index holds at most 2,704 bytes (`BTMaxItemSize`, with 8 kB pages), and
    /// the tables' primary keys and the tombstones' index are b-trees on those columns. A longer
    /// key is refused by the server whatever else the row holds, and would fail every try of its
    /// batch; the margin is the entry's header and the texts' length words and alignment.
    static let maxKeyBytes = 2_600

    /// How many bytes a record's name may take in `zone`.
    static func nameRoom(in zone: ZoneID) -> Int {
        maxKeyBytes - zone.ownerRecordName.utf8.count - zone.zoneName.utf8.count
    }

    /// Why a record (or deletion) named `name` cannot be applied in `zone`.
    static func nameTooLong(_ name: String, in zone: ZoneID, what: String) -> String {
        "\(what) is \(name.utf8.count.grouped) bytes long: with the zone's owner and name that is more than "
            + "the \(maxKeyBytes.grouped) bytes an entry of PostgreSQL's index of the rows can hold (\(nameRoom(in: zone).grouped) are left for the name)"
    }

    /// Upserts, table by table: encoded (which validates them) while the rows before them are
    /// already on their way, then merged unless they were copied into the table itself. Returns,
    /// when the batch has deletions, which entries were applied; a record that does not fit is a
    /// reject, or fails the batch with `onBadRecord: fail`.
    private func copyUpserts(
        of batch: ChangeBatch, sorted: inout SortedBatch, schema: PostgresSchema, direct: Bool, session: Session,
        outcome: inout BatchOutcome, beforeReadingRows: () throws -> Void, on c: Connection
    ) throws -> [Bool] {
        let zone = batch.zoneID
        let entries = batch.entries
        var applied = [Bool](repeating: false, count: sorted.deletions.isEmpty ? 0 : entries.count)
        var growth = SchemaGrowth(zoneName: zone.zoneName)
        for (t, table) in schema.tables.enumerated() where !sorted.tables[t].positions.isEmpty {
            let rows = sorted.tables[t]
            if direct {
                if rows.repeatsARecord { throw DirectCopyConflict(table: table.mapping.table) }
                session.encoders[t].beginDirectRows(zone: zone, runID: batch.runID, generation: batch.generation)
            } else {
                try stage(t, of: schema, session: session, on: c)
                session.encoders[t].beginStagingRows()
            }
            var staged = 0
            // Versions this table's encoding refused, by name and place: with repeats, an earlier
            // version of the name staged before it must not be merged in its stead.
            var refused: [(name: String, seq: Int)] = []
            do {
                try c.copyIn(direct ? table.copyIntoTable : table.copyIntoStaging) { writer in
                    for i in rows.positions {
                        guard case .record(let record) = entries[i] else { continue }
                        if let problem = session.encoders[t].append(record, seq: Int32(i)) {
                            if settings.policies.onBadRecord == .fail {
                                throw Self.badRecord("\(record.recordName) (\(record.recordType))", in: zone, problem)
                            }
                            sorted.rejects.append(Reject(seq: i, entry: entries[i], recordType: record.recordType, error: problem))
                            if rows.repeatsARecord { refused.append((record.recordName, i)) }
                            continue
                        }
                        outcome.upserts += 1
                        staged += 1
                        if !applied.isEmpty { applied[i] = true }
                        if session.encoders[t].pendingByteCount >= Self.copyChunkBytes { try session.encoders[t].send(to: writer) }
                    }
                    try session.encoders[t].sendEnd(to: writer)
                }
            } catch let error as PostgresError where direct && error.sqlState == "23505" {
                // > unique_violation: 23505
                throw DirectCopyConflict(table: table.mapping.table)
            } catch let error as PostgresError {
                // The server names a table for a constraint, not for a value a trigger or a
                // cast refused: the log and the run's error say which table was being written.
                throw error.inTable(table.mapping.table)
            }
            // Fields without a column, met while encoding: once every table's are known, the
            // batch is applied again with their columns (and nothing of this try is kept).
            for field in session.encoders[t].newFields {
                growth.add(field: field.name, typeTag: field.typeTag, of: table.mapping.recordType)
            }
            if !direct {
                do {
                    // A version is unchanged when its tag is the one before it: the live row's
                    // (of the batch's generation), or the batch's previous version of the record.
                    // Without repeats, those are the rows the merge leaves alone.
                    var unchanged = 0
                    // The last version wins, also when it does not fit: the row is left as it
                    // was before the batch (the reject says why), not given an older version
                    // of the batch's, which the record no longer is. Only the versions since the
                    // name's last deletion before it go (one before a deletion is the row that
                    // deletion ends, its values kept in a tombstone), and only when no version
                    // after it was staged. They still count as the batch's changes, as any
                    // version a later one replaced does.
                    for (name, seq) in refused where !name.containsNUL {
                        let since = Self.lastDeletion(of: name, before: seq, in: entries) ?? -1
                        try c.query(
                            """
                            DELETE FROM \(table.stagingName)
                            WHERE record_name = $1 AND seq < $2::integer AND seq > $3::integer
                                AND NOT EXISTS (SELECT 1 FROM \(table.stagingName) AS later WHERE later.record_name = $1 AND later.seq > $2::integer)
                            """, [name, String(seq), String(since)])
                    }
                    if rows.repeatsARecord {
                        try beforeReadingRows()
                        unchanged = try c.query(table.countUnchanged, [zone.ownerRecordName, zone.zoneName, String(batch.generation)])
                            .scalar(as: Int.self)
                    }
                    let merged = try c.query(
                        rows.repeatsARecord ? table.mergeKeepingLast : table.merge,
                        [zone.ownerRecordName, zone.zoneName, String(batch.runID), String(batch.generation)])
                    if !rows.repeatsARecord { unchanged = max(0, staged - merged.affectedRows) }
                    outcome.upserts -= unchanged
                    outcome.unchanged += unchanged
                } catch let error as PostgresError {
                    throw error.inTable(table.mapping.table)
                }
            }
        }
        if !growth.isEmpty { throw growth }
        return applied
    }

    /// Where the last deletion of `name` (by its bytes) before `position` is among `entries`.
    static func lastDeletion(of name: String, before position: Int, in entries: [RecordEntry]) -> Int? {
        let exact = ExactName(name)
        for i in stride(from: position - 1, through: 0, by: -1) {
            if case .deleted(let deleted) = entries[i], ExactName(deleted) == exact { return i }
        }
        return nil
    }

    /// A record's name taken by a record of another type: CloudKit lets a deleted record's name
    /// be used again by a record of any type, and a feed read after both reports only the new
    /// record. Its row in the old type's table is deleted as if the deletion had been reported
    /// (and logged so), unless the batch's last version of the name is of that old type. Looked
    /// for, by the staged names, in the tables that may hold rows of the zone; returns how many
    /// rows went without a deletion of the batch to log them. When the batch itself reports the
    /// deletion, before any version of the name (`deletionsStaged`, a deletion not typed by an
    /// upsert before it), that deletion is the row's log, typed by it, and no second one is made.
    private func deleteOtherTypes(
        of sorted: SortedBatch, in batch: ChangeBatch, schema: PostgresSchema, deletionsStaged: Bool, on c: Connection
    ) throws -> Int {
        let staged = schema.tables.indices.filter { !sorted.tables[$0].positions.isEmpty }
        guard !staged.isEmpty, schema.tables.count > 1 else { return 0 }
        let holding = state(of: batch.zoneID).mayHoldRows
        let hard = settings.deletes == .hard
        var deleted = 0
        for (u, table) in schema.tables.enumerated() where holding.contains(table.mapping.table) {
            let others = staged.filter { $0 != u }
            guard !others.isEmpty else { continue }
            let names = others.map { "SELECT record_name, seq FROM \(schema.tables[$0].stagingName)" }.joined(separator: " UNION ALL ")
            // The batch's own later version of the name in this table keeps the row.
            let laterHere =
                staged.contains(u)
                ? "WHERE NOT EXISTS (SELECT 1 FROM \(table.stagingName) AS s WHERE s.record_name = o.record_name AND s.seq > o.seq)" : ""
            let change =
                hard
                ? "DELETE FROM \(table.qualifiedName) AS t"
                : "UPDATE \(table.qualifiedName) AS t SET deleted_at = now(), synced_at = now(), run_id = $3::bigint"
            // A deletion the batch reports before any version of the name is this row's: typed by
            // it, and the row not logged again. Not when the batch wrote a version of the name
            // into this table: the row going is then that version, replaced by another type's,
            // not the one the deletion took. (The statement reads zf_deletes as it was before the
            // typing, as every part of one statement does.)
            let fromBefore =
                staged.contains(u) ? " AND NOT EXISTS (SELECT 1 FROM \(table.stagingName) AS s WHERE s.record_name = d.record_name)" : ""
            let reported = "SELECT 1 FROM zf_deletes AS d WHERE d.record_name = gone.record_name AND d.record_type IS NULL\(fromBefore)"
            let typed =
                deletionsStaged
                ? """
                , typed AS (
                    UPDATE zf_deletes AS d SET record_type = gone.record_type FROM gone
                    WHERE d.record_name = gone.record_name AND d.record_type IS NULL\(fromBefore))
                """ : ""
            // The names as one array looked up by the rows' key (see `byTheirNames`).
            deleted += try c.query(
                """
                WITH gone AS (
                    \(change)
                    WHERE t.zone_owner = $1 AND t.zone_name = $2 AND t.deleted_at IS NULL
                        AND \(Self.byTheirNames("SELECT o.record_name FROM (\(names)) AS o \(laterHere)"))
                    RETURNING t.record_name, t.record_type)\(typed)
                INSERT INTO \(schema.tombstones) (pipeline, zone_owner, zone_name, record_name, record_type, reason, run_id)
                SELECT $4, $1, $2, record_name, record_type, 'deleted', $3::bigint FROM gone
                \(deletionsStaged ? "WHERE NOT EXISTS (\(reported))" : "")
                """, [batch.zoneID.ownerRecordName, batch.zoneID.zoneName, String(batch.runID), pipelineName]
            ).affectedRows
        }
        return deleted
    }

    /// The batch's deletions into `zf_deletes`, each typed by the name's last applied upsert
    /// before it (the row it deletes, when the batch made it), and marked `final` when it is the
    /// name's last entry: only such a deletion touches its row. Names by their bytes
    /// (`ExactName`), as the rows' keys compare them.
    private func stageDeletions(_ deletions: inout [Deletion], of batch: ChangeBatch, applied: [Bool], on c: Connection) throws {
        // Only the names deleted in the batch are followed: two dictionaries of every record of
        // the batch, grown a record at a time, for the few names deleted, made applying
        // deletions 9% of the CPU of a run with churn (perf); 2.5% now.
        var lastUpsert: [ExactName: String?] = [:]
        lastUpsert.reserveCapacity(deletions.count)
        for deletion in deletions { lastUpsert[ExactName(deletion.recordName)] = .some(nil) }
        // The deletions by their place in the batch, and each name's deletions waiting for an
        // upsert after them.
        var next = 0
        var awaitingUpsert: [ExactName: [Int]] = [:]
        let entries = batch.entries
        for i in entries.indices {
            if let (recordType, recordName) = entries[i].liveRecordTypeAndName {
                guard applied[i] else { continue }
                let name = ExactName(recordName)
                guard let at = lastUpsert.index(forKey: name) else { continue }
                lastUpsert.values[at] = recordType
                for d in awaitingUpsert.removeValue(forKey: name) ?? [] { deletions[d].laterType = recordType }
            } else if case .deleted = entries[i], next < deletions.count, deletions[next].seq == Int32(i) {
                let name = ExactName(deletions[next].recordName)
                deletions[next].recordType = lastUpsert[name] ?? nil
                awaitingUpsert[name, default: []].append(next)
                next += 1
            }
        }
        // A name's deletions that no applied upsert came after: the last of them is final.
        for waiting in awaitingUpsert.values { if let last = waiting.last { deletions[last].final = true } }
        var buffer = BinaryCopyBuffer(capacity: deletions.count * 64)
        for d in deletions {
            buffer.beginTuple(fieldCount: 5)
            buffer.append(integer: d.seq)
            buffer.append(text: d.recordName)
            buffer.append(text: d.recordType)
            buffer.append(text: d.laterType)
            buffer.append(boolean: d.final)
        }
        buffer.finish()
        try c.copyIn("COPY zf_deletes (seq, record_name, record_type, later_type, final) FROM STDIN (FORMAT binary)") { writer in
            try buffer.withUnsafeBytes { try writer.write($0) }
        }
    }

    /// Deletions, staged (`stageDeletions`): only a record's last change in the batch, if it is a
    /// deletion, touches its row; every deletion is logged as a tombstone, typed by the row it
    /// deleted.
    private func applyDeletions(of batch: ChangeBatch, schema: PostgresSchema, on c: Connection) throws {
        let owner = batch.zoneID.ownerRecordName
        let zoneName = batch.zoneID.zoneName
        let run = String(batch.runID)
        let hard = settings.deletes == .hard
        for table in schema.tables {
            let change =
                hard
                ? "DELETE FROM \(table.qualifiedName) AS t"
                : "UPDATE \(table.qualifiedName) AS t SET deleted_at = coalesce(t.deleted_at, now()), synced_at = now(), run_id = $3::bigint"
            try c.query(
                """
                WITH gone AS (
                    \(change)
                    WHERE t.zone_owner = $1 AND t.zone_name = $2 AND \(Self.byTheirNames("SELECT record_name FROM zf_deletes WHERE final"))
                    RETURNING t.record_name, t.record_type)
                UPDATE zf_deletes AS d SET record_type = gone.record_type FROM gone
                WHERE d.record_name = gone.record_name AND d.record_type IS NULL
                """, hard ? [owner, zoneName] : [owner, zoneName, run])
        }
        try c.query(
            """
            INSERT INTO \(schema.tombstones) (pipeline, zone_owner, zone_name, record_name, record_type, reason, run_id)
            SELECT $4, $1, $2, record_name, coalesce(record_type, later_type), 'deleted', $3::bigint FROM zf_deletes ORDER BY seq
            """, [owner, zoneName, run, pipelineName])
    }

    /// Each reject, with the entry as the server sent it, to `zonefeed_rejects`: without it
    /// (`raw` null, and the error says why) when jsonb would not take it, rather than a batch
    /// the server refuses at every try.
    private func record(_ rejects: [Reject], of batch: ChangeBatch, on c: Connection) throws {
        for reject in rejects {
            var json = JSONWriter()
            json.spellsOutNUL = true
            json.write(reject.entry.json)
            var error = reject.error
            if let problem = json.bytes.withUnsafeBufferPointer({ limits.rejectsJSONB.problem(with: $0) }) {
                error += "; the entry is not kept in raw: \(problem)"
                json.bytes = []
            }
            try c.query(
                """
                INSERT INTO \(schema.rejects) (pipeline, zone_owner, zone_name, record_name, record_type, raw, error, run_id)
                VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8::bigint)
                """,
                [
                    pipelineName, batch.zoneID.ownerRecordName, batch.zoneID.zoneName, reject.entry.recordName.map(Self.withoutNUL),
                    reject.recordType.map(Self.withoutNUL), json.bytes.isEmpty ? nil : String(decoding: json.bytes, as: UTF8.self),
                    Self.withoutNUL(error),
                    String(batch.runID),
                ])
        }
    }

    /// The zone's token moves past the batch, from the token the batch was read from and in the
    /// batch's generation only. The token fences it against another process that applied the
    /// same pages meanwhile (both took the zone, one's claim lost with its connection), and
    /// against a commit that went through though its answer was lost: either would log the
    /// batch's tombstones and count its records twice. The generation fences it against a
    /// resync begun elsewhere meanwhile (an encrypted-data reset, a reset), whose generation its
    /// rows and token would not belong to.
    private func moveCheckpoint(past batch: ChangeBatch, on c: Connection) throws {
        var values = [
            pipelineName, batch.zoneID.ownerRecordName, batch.zoneID.zoneName, batch.token.value, String(batch.entries.count),
            batch.isLast ? "true" : "false", batch.finishesResync ? "true" : "false",
            state(of: batch.zoneID).seenPendingSeq ?? "0", String(batch.generation), batch.from?.value,
        ]
        // The token the batch was read from (for one written alongside, the batch before's).
        var fences = " AND token IS NOT DISTINCT FROM $10"
        // The row this run read, not one made since for a zone of the same name, deleted and
        // made again (its generation starts at 1 again, as this one's may have).
        if let incarnation = state(of: batch.zoneID).incarnation {
            values.append(incarnation)
            fences += " AND incarnation = $\(values.count)::bigint"
        }
        let updated = try c.query(
            """
            UPDATE \(schema.checkpoints)
            SET token = $4, records_applied = records_applied + $5, updated_at = now(),
                pending = pending AND NOT ($6::boolean AND pending_seq = $8::bigint),
                resyncing = resyncing AND NOT $7::boolean, last_error = NULL
            WHERE pipeline = $1 AND scope = 'zone' AND zone_owner = $2 AND zone_name = $3 AND generation = $9::integer\(fences)
            """, values)
        if batch.follows != nil, updated.affectedRows == 0 {
            throw SyncError(
                .failed,
                message: "the checkpoint of zone \(batch.zoneID.zoneName) was not at the token of the batch before this one when this one came to "
                    + "commit (that batch had not committed, or the checkpoint was moved meanwhile); nothing of the batch was applied, and the "
                    + "next run resumes from the checkpoint: nothing needs doing")
        }
        guard updated.affectedRows == 1 else {
            throw SyncError(
                .failed,
                message: "the checkpoint of zone \(batch.zoneID.zoneName) was moved, reset, resynced or deleted while the zone was being applied "
                    + "(by another process that applied or reset the zone, or by this batch itself, committed before its answer was lost); "
                    + "nothing of the batch was applied now, and the next run resumes from the checkpoint: nothing needs doing")
        }
    }

    /// The rows of records a deletion sweep found still there join the batch's generation, so
    /// that the sweep's end leaves them alone; nothing else of them changes.
    private func keepListed(_ batch: ChangeBatch, schema: PostgresSchema, on c: Connection) throws {
        try stageListed(batch.listed, of: batch.zoneID, on: c)
        let types = Set(batch.listed.map(\.recordType))
        for table in schema.tables where types.contains(table.mapping.recordType) {
            try c.query(
                """
                UPDATE \(table.qualifiedName) AS t SET generation = $3::integer
                WHERE t.zone_owner = $1 AND t.zone_name = $2 AND \(Self.byTheirNames("SELECT record_name FROM zf_listed WHERE record_type = $4"))
                    AND t.generation < $3::integer
                """,
                [batch.zoneID.ownerRecordName, batch.zoneID.zoneName, String(batch.generation), table.mapping.recordType])
        }
    }

    /// A sweep's names into `zf_listed`, emptied first (of a batch's rejects, `keepRejected`'s),
    /// each with the change tag it was listed with; not a name no row can have.
    private func stageListed(_ listed: [ListedRecords], of zone: ZoneID, on c: Connection) throws {
        try c.query("DELETE FROM zf_listed")
        let nameRoom = Self.nameRoom(in: zone)
        var buffer = BinaryCopyBuffer(capacity: listed.reduce(0) { $0 + $1.names.count * 64 })
        for list in listed {
            for (name, tag) in zip(list.names, list.changeTags) where !name.containsNUL && name.utf8.count <= nameRoom {
                buffer.beginTuple(fieldCount: 3)
                buffer.append(text: list.recordType)
                buffer.append(text: name)
                buffer.append(text: tag.flatMap { $0.containsNUL ? nil : $0 })
            }
        }
        buffer.finish()
        try c.copyIn("COPY zf_listed (record_type, record_name, change_tag) FROM STDIN (FORMAT binary)") { writer in
            try buffer.withUnsafeBytes { try writer.write($0) }
        }
    }

    /// The names a sweep listed that have no live row in their type's table (records the reads
    /// before missed), each once, for the engine to fetch before the sweep's batch; not a version
    /// the zone's rejects hold already (by its change tag), which would be fetched and refused
    /// again at every sweep. Reads only.
    public func listedWithoutRows(_ listed: [ListedRecords], in zone: ZoneID) async throws -> [ListedRecords] {
        let schema = self.schema
        let pipelineName = self.pipelineName
        return try await onConnection(of: zone) { c, _ in
            try c.transaction {
                for statement in PostgresSchema.sessionTablesDDL { try c.execute(statement) }
                try self.stageListed(listed, of: zone, on: c)
                var missing: [ListedRecords] = []
                for type in Set(listed.map(\.recordType)).sorted() {
                    guard let t = schema.table(forRecordType: type) else { continue }
                    let names = try c.query(
                        """
                        SELECT DISTINCT l.record_name FROM zf_listed AS l
                        WHERE l.record_type = $3 AND NOT EXISTS (
                            SELECT 1 FROM \(schema.tables[t].qualifiedName) AS t
                            WHERE t.zone_owner = $1 AND t.zone_name = $2 AND t.record_name = l.record_name AND t.deleted_at IS NULL)
                        AND NOT EXISTS (
                            SELECT 1 FROM \(schema.rejects) AS r
                            WHERE r.pipeline = $4 AND r.zone_owner = $1 AND r.zone_name = $2 AND r.record_name = l.record_name
                                AND r.raw ->> 'recordChangeTag' = l.change_tag)
                        """, [zone.ownerRecordName, zone.zoneName, type, pipelineName]
                    ).rows.map { try $0.decode(0, as: String.self) }
                    if !names.isEmpty { missing.append(ListedRecords(recordType: type, names: names)) }
                }
                return missing
            }
        }
    }

    /// The rows of records the batch could not apply but which are at the source (an error
    /// entry for the record alone, an entry that cannot be read, a version that does not fit its
    /// table) join the batch's generation as they are: a resync's sweep would otherwise take
    /// them for deleted. A reject of a known type keeps the row of that type's table only (one
    /// of a type without a table keeps none: the name's row of another type is no record's now,
    /// and the sweep takes it); an error entry, whose type is not said, keeps the name's row in
    /// whichever table holds it. Outside a resync the rows are of the batch's generation already,
    /// and nothing changes.
    private func keepRejected(_ rejects: [Reject], of batch: ChangeBatch, schema: PostgresSchema, on c: Connection) throws {
        let nameRoom = Self.nameRoom(in: batch.zoneID)
        let kept = rejects.compactMap { reject -> (recordType: String?, name: String)? in
            guard let name = reject.entry.nameOfARecordStillThere, !name.containsNUL, name.utf8.count <= nameRoom else { return nil }
            guard let recordType = reject.recordType else { return (nil, name) }
            return schema.table(forRecordType: recordType) == nil ? nil : (recordType, name)
        }
        guard !kept.isEmpty else { return }
        var buffer = BinaryCopyBuffer(capacity: kept.reduce(0) { $0 + $1.name.utf8.count + ($1.recordType?.utf8.count ?? 0) + 16 })
        for (recordType, name) in kept {
            buffer.beginTuple(fieldCount: 2)
            buffer.append(text: recordType)
            buffer.append(text: name)
        }
        buffer.finish()
        try c.copyIn("COPY zf_listed (record_type, record_name) FROM STDIN (FORMAT binary)") { writer in
            try buffer.withUnsafeBytes { try writer.write($0) }
        }
        let holding = state(of: batch.zoneID).mayHoldRows
        for table in schema.tables where holding.contains(table.mapping.table) {
            try c.query(
                """
                UPDATE \(table.qualifiedName) AS t SET generation = $3::integer
                WHERE t.zone_owner = $1 AND t.zone_name = $2
                    AND \(Self.byTheirNames("SELECT record_name FROM zf_listed WHERE record_type IS NULL OR record_type = $4"))
                    AND t.generation < $3::integer
                """,
                [batch.zoneID.ownerRecordName, batch.zoneID.zoneName, String(batch.generation), table.mapping.recordType])
        }
    }

    /// The condition that picks a zone's rows by the names `names` (a query of one text column)
    /// gives: one array, made once, looked up by the rows' key. Joined to the names' temporary
    /// table instead, a table just filled (a backfill, its statistics not yet analyzed) was
    /// estimated at a row for the zone, and PostgreSQL read every row of the zone against every
    /// name: a sweep's batch of names after a backfill of 35,000 Notes took 20 s where this takes
    /// well under one (in a table of 200,000 stale rows, 5,000 names: 454 ms joined, 42 ms so).
    static func byTheirNames(_ names: String) -> String {
        "t.record_name = ANY (ARRAY(\(names)))"
    }

    /// Mark-and-sweep: after a refetch from a nil token, rows the refetch did not touch (an older
    /// generation) are gone from the source.
    private func sweep(_ zone: ZoneID, schema: PostgresSchema, generation: Int, runID: Int64, on c: Connection) throws -> Int {
        var swept = 0
        for table in schema.tables {
            let change =
                settings.deletes == .hard
                ? "DELETE FROM \(table.qualifiedName) WHERE zone_owner = $1 AND zone_name = $2 AND generation < $4::integer"
                : "UPDATE \(table.qualifiedName) SET deleted_at = now(), synced_at = now(), run_id = $3::bigint WHERE zone_owner = $1 AND zone_name = $2 AND generation < $4::integer AND deleted_at IS NULL"
            let result = try c.query(
                """
                WITH gone AS (\(change) RETURNING record_name, record_type)
                INSERT INTO \(schema.tombstones) (pipeline, zone_owner, zone_name, record_name, record_type, reason, run_id)
                SELECT $5, $1, $2, record_name, record_type, 'resync', $3::bigint FROM gone
                """, [zone.ownerRecordName, zone.zoneName, String(runID), String(generation), pipelineName])
            swept += result.affectedRows
        }
        return swept
    }

    static func withoutNUL(_ s: String) -> String {
        s.containsNUL ? s.replacingOccurrences(of: "\u{0}", with: "\\u0000", options: .literal) : s
    }
}
