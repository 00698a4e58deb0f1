import CloudKitModel
import Dispatch
import Foundation
import LibPQ
import Logging
import ZoneFeed

/// Zones: claimed under a session's advisory lock, their checkpoints, resyncs, errors and
/// deletions.
extension PostgresDestination {
    /// Claims the zone on the session that holds the fewest zones (the first idle one of those), opening
    /// its connection if it is new; the zone's work then goes to that session until it is
    /// released. A session applies its zones' batches one after another: zones fetched from far
    /// away outnumber the connections, which are needed only for writing.
    public func claimZone(_ zone: ZoneID) async throws -> Bool {
        let key = self.key
        let sessionCount = sessions.count
        let index = state.withLock { state -> Int in
            var load = [Int](repeating: 0, count: sessionCount)
            for session in state.sessionOfZone.values { load[session] += 1 }
            // Of those, one that no zone's batch is being written on (one lent to a zone alone).
            let least = load.indices.min { (load[$0], state.batchesOnSession[$0]) < (load[$1], state.batchesOnSession[$1]) } ?? 0
            state.sessionOfZone[zone] = least
            return least
        }
        let claimed: Bool
        do {
            claimed = try await on(sessions[index], opening: true) { c, _ in
                // > pg_try_advisory_lock: "Obtains an exclusive session-level advisory lock if
                // > available. This will either obtain the lock immediately and return true, or
                // > return false without waiting if the lock cannot be acquired immediately."
                try c.query("SELECT pg_try_advisory_lock(hashtextextended($1, 0))", [Self.claimLock(key, zone)]).scalar(as: Bool.self)
            }
        } catch {
            state.withLock { $0.sessionOfZone[zone] = nil }
            throw error
        }
        if !claimed { state.withLock { $0.sessionOfZone[zone] = nil } }
        return claimed
    }

    public func releaseZone(_ zone: ZoneID) async throws {
        let key = self.key
        // A zone that ends short of its feed's end (it failed) lets go of its copied names too.
        stopCopyingDirectly(zone, table: nil)
        defer { state.withLock { $0.sessionOfZone[zone] = nil } }
        try await onConnection(of: zone) { c, _ in
            try c.query("SELECT pg_advisory_unlock(hashtextextended($1, 0))", [Self.claimLock(key, zone)])
        }
    }

    /// What a zone's claim lock is a 64-bit hash of: the pipeline's key and the zone, its
    /// owner's length first so that no two zones' texts are one. A lock of two 32-bit hashes,
    /// the pipeline's and the zone's, made zones whose names collide in 32 bits (even odds of a
    /// pair among 77,000 zones) one lock, and one of them was skipped in every run that held
    /// the other, as claimed elsewhere.
    static func claimLock(_ key: String, _ zone: ZoneID) -> String {
        "\(key):zone:\(zone.ownerRecordName.utf8.count):\(zone.ownerRecordName)/\(zone.zoneName)"
    }

    public func zoneCheckpoint(_ zone: ZoneID) async throws -> ZoneCheckpoint {
        let schema = self.schema
        let name = pipelineName
        return try await onConnection(of: zone) { c, _ in
            let row = try c.query(
                """
                INSERT INTO \(schema.checkpoints) (pipeline, scope, zone_owner, zone_name) VALUES ($1, 'zone', $2, $3)
                ON CONFLICT (pipeline, scope, zone_owner, zone_name) DO UPDATE SET pipeline = EXCLUDED.pipeline
                RETURNING token, generation, resyncing, pending_seq, incarnation
                """, [name, zone.ownerRecordName, zone.zoneName]
            ).rows[0]
            let (seenPendingSeq, incarnation): (String, String) = (try row.decode(3), try row.decode(4))
            self.updateState(of: zone) {
                $0.seenPendingSeq = seenPendingSeq
                $0.incarnation = incarnation
            }
            return ZoneCheckpoint(
                token: try row.decode(0, as: String?.self).map(ChangeToken.init), generation: try row.decode(1),
                resyncing: try row.decode(2))
        }
    }

    public func beginResync(_ zone: ZoneID, reason: String) async throws -> ZoneCheckpoint {
        try await onConnection(of: zone) { c, _ in try self.beginResync(zone, on: c) }
    }

    func beginResync(_ zone: ZoneID, on c: Connection) throws -> ZoneCheckpoint {
        let row = try c.query(
            """
            INSERT INTO \(schema.checkpoints) (pipeline, scope, zone_owner, zone_name, token, generation, resyncing, pending)
            VALUES ($1, 'zone', $2, $3, NULL, 1, true, true)
            ON CONFLICT (pipeline, scope, zone_owner, zone_name) DO UPDATE
                SET token = NULL, generation = \(schema.checkpoints).generation + 1, resyncing = true, pending = true,
                    pending_seq = \(schema.checkpoints).pending_seq + 1, updated_at = now()
            RETURNING generation, pending_seq, incarnation
            """, [pipelineName, zone.ownerRecordName, zone.zoneName]
        ).rows[0]
        let (seenPendingSeq, incarnation): (String, String) = (try row.decode(1), try row.decode(2))
        updateState(of: zone) {
            $0.seenPendingSeq = seenPendingSeq
            $0.incarnation = incarnation
        }
        return ZoneCheckpoint(token: nil, generation: try row.decode(0), resyncing: true)
    }

    public func beginSweep(_ zone: ZoneID, token: ChangeToken) async throws -> ZoneCheckpoint {
        let schema = self.schema
        let name = pipelineName
        return try await onConnection(of: zone) { c, _ in
            let rows = try c.query(
                """
                UPDATE \(schema.checkpoints)
                SET token = $4, generation = generation + 1, resyncing = true, updated_at = now()
                WHERE pipeline = $1 AND scope = 'zone' AND zone_owner = $2 AND zone_name = $3
                RETURNING generation, pending_seq
                """, [name, zone.ownerRecordName, zone.zoneName, token.value]
            ).rows
            guard let row = rows.first else {
                throw SyncError(
                    .failed, zoneID: zone,
                    message:
                        "the checkpoint of zone \(zone.zoneName) was deleted while the zone was being applied; the deletion sweep did not start, and the next run starts from the beginning"
                )
            }
            let seenPendingSeq: String = try row.decode(1)
            self.updateState(of: zone) { $0.seenPendingSeq = seenPendingSeq }
            return ZoneCheckpoint(token: token, generation: try row.decode(0), resyncing: true)
        }
    }

    /// PostgreSQL text holds no NUL: a zone named with one is not followed (stored cut at the
    /// NUL, `a\u{0}one` and `a\u{0}two` would both be `a`). Nor is a zone whose names are too
    /// long for the b-tree entries that key its checkpoint and rows (see `maxKeyBytes`).
    public func refusal(of zone: ZoneID) -> String? {
        if zone.zoneName.containsNUL || zone.ownerRecordName.containsNUL {
            return "the zone's name holds a NUL character, which PostgreSQL text cannot hold; the zone is not exported "
                + "(stored cut at the NUL, it would share its rows and checkpoint with another zone)"
        }
        let length = zone.ownerRecordName.utf8.count + zone.zoneName.utf8.count
        guard length > Self.maxZoneKeyBytes else { return nil }
        return "the zone's owner and name take \(length.grouped) bytes, more than the \(Self.maxZoneKeyBytes.grouped) a zone is kept under; "
            + "the zone is not exported (PostgreSQL's index of the checkpoints and rows holds an entry of at most 2,704 bytes, "
            + "and its records' names need room beside the zone's)"
    }

    /// The most bytes a zone's owner and name take together: with a pipeline name (at most
    /// `Pipeline.maxNameBytes`) they key its checkpoint, and with a record's name its rows,
    /// whose key takes at most `maxKeyBytes`; CloudKit's own names are at most 255 characters.
    static let maxZoneKeyBytes = 2_048

    public func recordZoneError(_ zone: ZoneID, message: String?) async throws {
        let schema = self.schema
        let name = pipelineName
        try await onConnection(of: zone) { c, _ in
            try c.query(
                "UPDATE \(schema.checkpoints) SET last_error = $4 WHERE pipeline = $1 AND scope = 'zone' AND zone_owner = $2 AND zone_name = $3",
                [name, zone.ownerRecordName, zone.zoneName, message.map(Self.withoutNUL)])
        }
    }

    /// A zone this run found gone (`ZONE_NOT_FOUND`) while it held it. Another process may have
    /// read the zone's making anew in the database feed meanwhile and marked its checkpoint
    /// pending: that mark is kept, with no token, so that the next run reads the new zone whole,
    /// where dropping the checkpoint lost it until the zone changed again.
    public func deleteZone(_ deletion: ZoneDeletion, runID: Int64) async throws -> BatchOutcome {
        let seen = state(of: deletion.zoneID)
        return try await onConnection(of: deletion.zoneID) { c, _ in
            try c.transaction {
                let outcome = try self.deleteZoneRows(
                    deletion, runID: runID, keepingAMarkSince: seen.seenPendingSeq.map { ($0, seen.incarnation) }, on: c)
                try self.addToRun(outcome, on: c)
                return outcome
            }
        }
    }

    /// Tombstones (reason `zone_deleted`) or deletes (`zone_purged`, or `deletes: hard`) every row
    /// of a zone, logs each in `zonefeed_tombstones`, and drops the zone's checkpoint; with
    /// `keepingAMarkSince` (the checkpoint's `pending_seq` and `incarnation` as this run read
    /// them), a checkpoint marked pending since, or made anew, is kept with no token instead.
    func deleteZoneRows(
        _ deletion: ZoneDeletion, runID: Int64, keepingAMarkSince seen: (pendingSeq: String, incarnation: String?)? = nil, on c: Connection
    ) throws -> BatchOutcome {
        let purge = deletion.reason == .purged
        let reason = purge ? "zone_purged" : "zone_deleted"
        var outcome = BatchOutcome()
        func deleteRows() throws {
            for table in try refreshed(schema, on: c).tables {
                // Only rows that were live are logged: a tombstoned row's deletion was logged already.
                let change =
                    purge || settings.deletes == .hard
                    ? "DELETE FROM \(table.qualifiedName) WHERE zone_owner = $1 AND zone_name = $2 RETURNING record_name, record_type, deleted_at IS NULL AS was_live"
                    : "UPDATE \(table.qualifiedName) SET deleted_at = now(), synced_at = now(), run_id = $3::bigint WHERE zone_owner = $1 AND zone_name = $2 AND deleted_at IS NULL RETURNING record_name, record_type, true AS was_live"
                let result = try c.query(
                    """
                    WITH gone AS (\(change))
                    INSERT INTO \(schema.tombstones) (pipeline, zone_owner, zone_name, record_name, record_type, reason, run_id)
                    SELECT $4, $1, $2, record_name, record_type, $5, $3::bigint FROM gone WHERE was_live
                    """, [deletion.zoneID.ownerRecordName, deletion.zoneID.zoneName, String(runID), pipelineName, reason])
                outcome.tombstones += result.affectedRows
            }
        }
        try deleteRows()
        let zone = [pipelineName, deletion.zoneID.ownerRecordName, deletion.zoneID.zoneName]
        if let seen {
            let dropped = try c.query(
                """
                DELETE FROM \(schema.checkpoints) WHERE pipeline = $1 AND scope = 'zone' AND zone_owner = $2 AND zone_name = $3
                    AND pending_seq = $4::bigint AND incarnation IS NOT DISTINCT FROM $5::bigint
                """, zone + [seen.pendingSeq, seen.incarnation])
            if dropped.affectedRows == 0 {
                try c.query(
                    """
                    UPDATE \(schema.checkpoints) SET token = NULL, last_error = NULL, updated_at = now()
                    WHERE pipeline = $1 AND scope = 'zone' AND zone_owner = $2 AND zone_name = $3
                    """, zone)
            }
        } else {
            try c.query("DELETE FROM \(schema.checkpoints) WHERE pipeline = $1 AND scope = 'zone' AND zone_owner = $2 AND zone_name = $3", zone)
        }
        // A batch of the zone that another run is writing holds the zone's checkpoint from its
        // last step (`moveCheckpoint`) to its commit: the checkpoint's deletion waited for it,
        // and its rows, committed after the pass above read the tables, are deleted by this one.
        // A batch short of that step finds the checkpoint gone and is not committed. (Locking the
        // checkpoint first would take the locks in the other order than a batch does.) The
        // tables are read again: that batch may have made one for a new record type.
        try deleteRows()
        return outcome
    }

    func addToRun(_ outcome: BatchOutcome, on c: Connection) throws {
        try c.query(
            """
            UPDATE \(schema.runs) SET pages = pages + $2, upserts = upserts + $3, tombstones = tombstones + $4,
                rejects = rejects + $5, skipped = skipped + $6
            WHERE run_id = $1
            """,
            [
                String(runID), String(outcome.pages), String(outcome.upserts), String(outcome.tombstones + outcome.swept),
                String(outcome.rejects), String(outcome.skipped),
            ])
    }
}
