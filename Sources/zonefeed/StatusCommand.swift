import ArgumentParser
import EmbeddedPostgresServer
import Foundation
import ZoneFeed
import ZoneFeedComponents
import ZoneFeedPostgres

struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show the checkpoints (zone, token, generation, counts), the last runs and the last changes of shape.")

    @OptionGroup var options: PipelineOptions

    func run() async throws {
        let pipeline = try options.loadPipeline()
        let logger = options.makeLogger()
        let (status, aboutSource) = try await options.withPostgresDestination(pipeline, logger: logger) { destination in
            try await destination.connect()
            return (try await destination.status(), sourceLines(pipeline, conninfo: destination.conninfo))
        }
        guard status.tablesExist, !(status.zones.isEmpty && status.runs.isEmpty) else {
            print("pipeline \(pipeline.name): no runs yet (run: zonefeed run \(InertText.escaped(options.pipelineFile)))")
            for line in aboutSource { print(line) }
            return
        }
        print("pipeline \(pipeline.name) (schema \(InertText.escaped(pipeline.postgres.schema)))")
        for line in aboutSource { print(line) }
        if pipeline.postgres.isEmbedded {
            let cluster = PostgresSettings.embeddedServer(logger: logger)
            print("embedded PostgreSQL cluster: \(InertText.escaped(cluster.configuration.directory))")
            if cluster.isRelocated {
                print("  (PostgreSQL's account cannot reach \(InertText.escaped(cluster.requestedDirectory)), the folder asked for)")
            }
            print("  to remove it, with no zonefeed command using it: \(InertText.escaped(cluster.removalCommand))")
        }
        print("")
        var rows = [["zone", "token", "generation", "state", "applied", "live rows", "deleted rows", "updated", "last error"]]
        for z in status.zones {
            let state = z.resyncing ? "resyncing" : (z.pending ? "pending" : "current")
            rows.append([
                z.scope == "database" ? "(database)" : z.zoneName, z.hasToken ? "set" : "none", String(z.generation),
                z.scope == "database" ? "" : state, Int(z.recordsApplied).grouped,
                z.scope == "database" ? "" : Int(z.liveRows).grouped, z.scope == "database" ? "" : Int(z.deletedRows).grouped,
                z.updatedAt, z.lastError ?? "",
            ])
        }
        print(Self.table(rows))
        print("")
        var runs = [["run", "status", "started", "finished", "pages", "upserts", "tombstones", "rejects", "throttled", "error"]]
        for r in status.runs {
            runs.append([
                String(r.runID), r.status, r.startedAt, r.finishedAt ?? "", Int(r.pages).grouped, Int(r.upserts).grouped,
                Int(r.tombstones).grouped, Int(r.rejects).grouped, String(format: "%.1f s", r.throttledSeconds), r.error ?? "",
            ])
        }
        print(Self.table(runs))
        guard !status.shapeChanges.isEmpty else { return }
        print("")
        print("changes of shape, the last \(status.shapeChanges.count), newest first:")
        var changes = [["changed", "run", "change", "table", "column", "type", "why"]]
        for s in status.shapeChanges {
            let c = s.change
            changes.append([
                s.changedAt, String(s.runID), c.kind == .tableCreated ? "table created" : "column added", c.table, c.column ?? "",
                c.columnType?.rawValue ?? "", c.why,
            ])
        }
        print(Self.table(changes))
    }

    /// What the source says of itself under the heading (a CloudKit source: its stored web
    /// auth token's user and times). `conninfo` is the destination's, where it keeps the
    /// source's vault.
    func sourceLines(_ pipeline: Pipeline, conninfo: String) -> [String] {
        let vault = WebAuthTokenTable(pipelineName: pipeline.name, schema: pipeline.postgres.schema, conninfo: conninfo)
        defer { vault.close() }
        let file = options.pipelineFile
        return pipeline.source.statusLines(
            StatusContext(pipelineName: pipeline.name, vault: vault) { "\(Invocation.command) \($0) \(Invocation.shellWord(file))" })
    }

    /// The rows as columns. Every cell is escaped here, the one place status prints them: zone
    /// names, errors, record types and names come from a server or the database, and a control
    /// character in one would drive the terminal (`\u{1b}[2J` clears it) or break the table.
    static func table(_ rows: [[String]]) -> String {
        let rows = rows.map { $0.map { InertText.escaped($0) } }
        var widths = [Int](repeating: 0, count: rows[0].count)
        for row in rows { for (i, cell) in row.enumerated() { widths[i] = max(widths[i], cell.count) } }
        return rows.map { row in
            row.enumerated().map { i, cell in cell.padding(toLength: widths[i], withPad: " ", startingAt: 0) }
                .joined(separator: "  ").trimmingCharacters(in: .whitespaces)
        }.joined(separator: "\n")
    }
}
