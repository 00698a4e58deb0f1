import CloudKitModel
import LibPQ
import ZoneFeed

extension PostgresDestination {
    /// Checkpoints, row counts, the last runs and the last changes of shape.
    public func status(lastRuns: Int = 10, lastShapeChanges: Int = 20) async throws -> PipelineStatus {
        let name = pipelineName
        let place = "schema \(settings.schema)"
        return try await onConnection { c in
            var schema = self.mappedSchema
            var status = PipelineStatus(place: place)
            let exists = try c.query("SELECT to_regclass($1) IS NOT NULL", [schema.checkpoints]).scalar(as: Bool.self)
            guard exists else {
                status.tablesExist = false
                return status
            }
            // A database from before zonefeed_schema_changes has no changes to show.
            if try c.query("SELECT to_regclass($1) IS NOT NULL", [schema.schemaChanges]).scalar(as: Bool.self) {
                let changes = try self.recordedChanges(on: c)
                schema = schema.applying(changes)
                let times = try c.query(
                    """
                    SELECT id, run_id, to_char(changed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS"Z"')
                    FROM \(schema.schemaChanges) WHERE pipeline = $1 ORDER BY id DESC LIMIT $2
                    """, [name, String(lastShapeChanges)]
                ).rows
                var shapeChanges = [["changed", "run", "change", "table", "column", "type", "why"]]
                for row in times {
                    let id: Int64 = try row.decode(0)
                    guard let c = changes.first(where: { $0.id == id }) else { continue }
                    shapeChanges.append([
                        try row.decode(2), String(try row.decode(1, as: Int64.self)), c.kind == .tableCreated ? "table created" : "column added",
                        c.table, c.column ?? "", c.columnType?.rawValue ?? "", c.why,
                    ])
                }
                if shapeChanges.count > 1 {
                    status.tables.append(
                        PipelineStatus.Table(title: "changes of shape, the last \(shapeChanges.count - 1), newest first:", rows: shapeChanges))
                }
            }
            // By the zone itself: owner `a/b` with zone `c` and owner `a` with zone `b/c` are two.
            var counts: [ZoneID: (Int64, Int64)] = [:]
            for table in schema.tables {
                for row in try c.query(
                    """
                    SELECT zone_owner, zone_name, count(*) FILTER (WHERE deleted_at IS NULL), count(*) FILTER (WHERE deleted_at IS NOT NULL)
                    FROM \(table.qualifiedName) GROUP BY 1, 2
                    """
                ).rows {
                    let key = ZoneID(zoneName: try row.decode(1), ownerRecordName: try row.decode(0))
                    let old = counts[key] ?? (0, 0)
                    counts[key] = (old.0 + (try row.decode(2, as: Int64.self)), old.1 + (try row.decode(3, as: Int64.self)))
                }
            }
            for row in try c.query(
                """
                SELECT scope, zone_owner, zone_name, token IS NOT NULL, generation, resyncing, pending, records_applied,
                       to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS"Z"'), last_error
                FROM \(schema.checkpoints) WHERE pipeline = $1 ORDER BY scope, zone_name, zone_owner
                """, [name]
            ).rows {
                let key = ZoneID(zoneName: try row.decode(2), ownerRecordName: try row.decode(1))
                status.zones.append(
                    PipelineStatus.Zone(
                        scope: try row.decode(0), zoneOwner: try row.decode(1), zoneName: try row.decode(2), hasToken: try row.decode(3),
                        generation: try row.decode(4), resyncing: try row.decode(5), pending: try row.decode(6),
                        recordsApplied: try row.decode(7), updatedAt: try row.decode(8), lastError: try row.decode(9),
                        liveRows: counts[key]?.0 ?? 0, deletedRows: counts[key]?.1 ?? 0))
            }
            for row in try c.query(
                """
                SELECT run_id, status, to_char(started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS"Z"'),
                       to_char(finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS"Z"'), pages, upserts, tombstones, rejects, error,
                       coalesce(to_jsonb(r) ->> 'throttled_seconds', '0')
                FROM \(schema.runs) AS r WHERE pipeline = $1 ORDER BY run_id DESC LIMIT $2
                """, [name, String(lastRuns)]
            ).rows {
                status.runs.append(
                    PipelineStatus.Run(
                        runID: try row.decode(0), status: try row.decode(1), startedAt: try row.decode(2), finishedAt: try row.decode(3),
                        pages: try row.decode(4), upserts: try row.decode(5), tombstones: try row.decode(6), rejects: try row.decode(7),
                        throttledSeconds: try row.decode(9, as: Double?.self) ?? 0, error: try row.decode(8)))
            }
            return status
        }
    }

    /// Marks zones for a resync from a nil token under a new generation; the next run refetches
    /// them and sweeps what the source no longer has. `all` also forgets the database token so
    /// that zones are rediscovered. A zone being applied right now is left alone and reported.
    /// With `addingUnknownZones` (the source names its zones in the file) a zone named here that
    /// has no checkpoint yet gets one that starts as a resync.
    public func reset(zoneNames: [String], all: Bool, addingUnknownZones: Bool = false) async throws -> ResetOutcome {
        let schema = self.schema
        let name = pipelineName
        let key = self.key
        return try await onConnection { c in
            var outcome = ResetOutcome()
            let rows = try c.query(
                "SELECT zone_owner, zone_name FROM \(schema.checkpoints) WHERE pipeline = $1 AND scope = 'zone' ORDER BY zone_name",
                [name]
            ).rows.map { ZoneID(zoneName: try $0.decode(1), ownerRecordName: try $0.decode(0)) }
            // By bytes: `café` composed and decomposed are two zones to CloudKit.
            var targets = all ? rows : rows.filter { row in zoneNames.contains { ExactName.same($0, row.zoneName) } }
            outcome.unknown = all ? [] : zoneNames.filter { n in !rows.contains { ExactName.same($0.zoneName, n) } }
            if addingUnknownZones {
                for zoneName in outcome.unknown { targets.append(ZoneID(zoneName: zoneName)) }
                outcome.unknown = []
            }
            for zone in targets {
                let lock = Self.claimLock(key, zone)
                guard try c.query("SELECT pg_try_advisory_lock(hashtextextended($1, 0))", [lock]).scalar(as: Bool.self) else {
                    outcome.busy.append(zone)
                    continue
                }
                defer { _ = try? c.query("SELECT pg_advisory_unlock(hashtextextended($1, 0))", [lock]) }
                _ = try self.beginResync(zone, on: c)
                outcome.reset.append(zone)
            }
            if all {
                try c.query("UPDATE \(schema.checkpoints) SET token = NULL, updated_at = now() WHERE pipeline = $1 AND scope = 'database'", [name])
            }
            return outcome
        }
    }
}
