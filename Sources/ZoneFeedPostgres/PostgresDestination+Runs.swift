import CloudKitModel
import Dispatch
import Foundation
import LibPQ
import Logging
import ZoneFeed

/// The run ledger (`zonefeed_runs`), the account the pipeline belongs to, and the database
/// feed's checkpoint: the work of a run's own session.
extension PostgresDestination {
    public func startRun() async throws -> Int64 {
        let schema = self.schema
        let pipelineName = pipelineName
        let key = self.key
        let id = try await onConnection { c -> Int64 in
            // A run killed without a word stays 'running'; its session lock is gone, which is how
            // it is told apart from a run still going on elsewhere.
            let stale = try c.query("SELECT run_id FROM \(schema.runs) WHERE pipeline = $1 AND status = 'running'", [pipelineName])
            for row in stale.rows {
                let id: String = try row.decode(0)
                let free = try c.query("SELECT pg_try_advisory_lock(hashtext($1), ($2::bigint % 2147483647)::integer)", ["\(key):run", id])
                if try free.scalar(as: Bool.self) {
                    try c.query(
                        """
                        UPDATE \(schema.runs) SET status = 'failed', finished_at = now(),
                            error = 'the process ended without recording an outcome (killed or crashed); the next run resumed from the last committed page'
                        WHERE run_id = $1 AND status = 'running'
                        """, [id])
                    try c.query("SELECT pg_advisory_unlock(hashtext($1), ($2::bigint % 2147483647)::integer)", ["\(key):run", id])
                }
            }
            // The row and the lock that says "alive" appear together (a session lock outlives the
            // COMMIT), so no other run can see the row without its lock and call it dead.
            return try c.transaction {
                let id = try c.query(
                    "INSERT INTO \(schema.runs) (pipeline, status, hostname, pid) VALUES ($1, 'running', $2, $3) RETURNING run_id",
                    [pipelineName, ProcessInfo.processInfo.hostName, String(getpid())]
                ).scalar(as: Int64.self)
                try c.query("SELECT pg_advisory_lock(hashtext($1), ($2::bigint % 2147483647)::integer)", ["\(key):run", String(id)])
                return id
            }
        }
        runID = id
        return id
    }

    public func finishRun(_ runID: Int64, status: RunStatus, error: String?, throttledSeconds: Double) async throws {
        let schema = self.schema
        try await onConnection { c in
            try c.query(
                "UPDATE \(schema.runs) SET status = $2, finished_at = now(), error = $3, throttled_seconds = $4 WHERE run_id = $1",
                [String(runID), status.rawValue, error.map(Self.withoutNUL), String(throttledSeconds)])
        }
    }

    // MARK: Account and database checkpoint

    public func storedAccount() async throws -> String? {
        let schema = self.schema
        let name = pipelineName
        return try await onConnection { c in
            try c.query(
                "SELECT account_user FROM \(schema.checkpoints) WHERE pipeline = $1 AND scope = 'database' AND zone_owner = '' AND zone_name = ''",
                [name]
            ).scalar
        }
    }

    public func storeAccount(_ user: String) async throws {
        let schema = self.schema
        let name = pipelineName
        try await onConnection { c in
            try c.query(
                """
                INSERT INTO \(schema.checkpoints) (pipeline, scope, account_user, pending) VALUES ($1, 'database', $2, false)
                ON CONFLICT (pipeline, scope, zone_owner, zone_name) DO UPDATE SET account_user = EXCLUDED.account_user
                """, [name, user])
        }
    }

    public func databaseCheckpoint() async throws -> ChangeToken? {
        let schema = self.schema
        let name = pipelineName
        return try await onConnection { c in
            try c.query(
                "SELECT token FROM \(schema.checkpoints) WHERE pipeline = $1 AND scope = 'database' AND zone_owner = '' AND zone_name = ''",
                [name]
            ).scalar.map(ChangeToken.init)
        }
    }

    public func applyDatabaseChanges(_ page: DatabaseChangePage, after previous: ChangeToken?, runID: Int64) async throws -> BatchOutcome? {
        let name = pipelineName
        let schema = self.schema
        let key = self.key
        return try await onConnection { c in
            try c.transaction { () -> BatchOutcome? in
                // Two runs reading the database feed take turns, and a run whose starting token
                // is stale stops: replaying old pages would replay old zone deletions.
                try c.query("SELECT pg_advisory_xact_lock(hashtext($1), hashtext('database feed'))", [key])
                let stored = try c.query(
                    "SELECT token FROM \(schema.checkpoints) WHERE pipeline = $1 AND scope = 'database' AND zone_owner = '' AND zone_name = ''",
                    [name]
                ).scalar
                guard stored == previous?.value else { return nil }
                var outcome = BatchOutcome()
                for deletion in page.deletedZones {
                    switch deletion.reason {
                    case .deleted, .purged:
                        outcome += try self.deleteZoneRows(deletion, runID: runID, on: c)
                    case .encryptedDataReset:
                        _ = try self.beginResync(deletion.zoneID, on: c)
                    }
                }
                for zone in page.modifiedZones {
                    try c.query(
                        """
                        INSERT INTO \(schema.checkpoints) (pipeline, scope, zone_owner, zone_name, pending) VALUES ($1, 'zone', $2, $3, true)
                        ON CONFLICT (pipeline, scope, zone_owner, zone_name)
                        DO UPDATE SET pending = true, pending_seq = \(schema.checkpoints).pending_seq + 1
                        """, [name, zone.ownerRecordName, zone.zoneName])
                }
                try c.query(
                    """
                    INSERT INTO \(schema.checkpoints) (pipeline, scope, token, pending) VALUES ($1, 'database', $2, false)
                    ON CONFLICT (pipeline, scope, zone_owner, zone_name) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
                    """, [name, page.syncToken.value])
                try self.addToRun(outcome, on: c)
                return outcome
            }
        }
    }

    public func markEveryZonePending() async throws {
        let schema = self.schema
        let name = pipelineName
        try await onConnection { c in
            try c.query(
                "UPDATE \(schema.checkpoints) SET pending = true, pending_seq = pending_seq + 1 WHERE pipeline = $1 AND scope = 'zone'", [name])
        }
    }

    public func pendingZones() async throws -> [ZoneID] {
        let schema = self.schema
        let name = pipelineName
        return try await onConnection { c in
            try c.query(
                """
                SELECT zone_owner, zone_name FROM \(schema.checkpoints)
                WHERE pipeline = $1 AND scope = 'zone' AND (pending OR resyncing)
                ORDER BY zone_name, zone_owner
                """, [name]
            ).rows.map { ZoneID(zoneName: try $0.decode(1), ownerRecordName: try $0.decode(0)) }
        }
    }
}
