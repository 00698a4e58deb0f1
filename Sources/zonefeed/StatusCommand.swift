import ArgumentParser
import CloudKitWebServices
import EmbeddedPostgresServer
import Foundation
import ZoneFeed
import ZoneFeedCloudKit
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
        let (status, token) = try await options.withPostgresDestination(pipeline, logger: logger) { destination in
            try await destination.connect()
            return (try await destination.status(), webAuthTokenLines(pipeline, conninfo: destination.conninfo))
        }
        guard status.tablesExist, !(status.zones.isEmpty && status.runs.isEmpty) else {
            print("pipeline \(pipeline.name): no runs yet (run: zonefeed run \(InertText.escaped(options.pipelineFile)))")
            for line in token { print(line) }
            return
        }
        print("pipeline \(pipeline.name) (schema \(InertText.escaped(pipeline.postgres.schema)))")
        for line in token { print(line) }
        if pipeline.postgres.isEmbedded {
            let cluster = PipelineOptions.embeddedPostgres(logger: logger)
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

    /// For a CloudKit pipeline, what its token store says of the stored web auth token: who
    /// signed in and when, when it last rotated, when a run last used it. Never the token.
    func webAuthTokenLines(_ pipeline: Pipeline, conninfo: String, now: Date = Date()) -> [String] {
        guard let settings = pipeline.source as? CloudKitSettings else { return [] }
        let table =
            settings.auth.webAuthTokenStore == .database
            ? WebAuthTokenTable(pipelineName: pipeline.name, schema: pipeline.postgres.schema, conninfo: conninfo) : nil
        defer { table?.close() }
        let summary: WebAuthTokenSummary?
        do {
            var configuration = try CloudKitSource.clientConfiguration(for: settings)
            configuration.webAuthTokenVault = table
            summary = try CloudKitClient.webAuthTokenSummary(configuration: configuration)
        } catch {
            return ["web auth token: cannot be read: \(InertText.escaped("\(error)"))"]
        }
        let login = LoginCommand.command(pipelineFile: options.pipelineFile)
        guard let summary else {
            let place = table?.location ?? settings.auth.webAuthTokenFile ?? "the token file"
            return ["web auth token: none stored in \(InertText.escaped(place)) (to sign in: \(login))"]
        }
        func when(_ date: Date?) -> String {
            guard let date else { return "unknown" }
            return "\(Self.utc(date)) (\(Self.ago(now.timeIntervalSince(date))))"
        }
        let user = summary.userRecordName.map { "\($0), signed in \(when(summary.signedInAt))" } ?? "unknown (not signed in with \(login))"
        let rows = [("user", user), ("last rotated", when(summary.rotatedAt)), ("last used by a run", when(summary.usedAt))]
        return ["web auth token: \(InertText.escaped(summary.location))"]
            + rows.map { "  " + $0.0.padding(toLength: 20, withPad: " ", startingAt: 0) + InertText.escaped($0.1) }
    }

    static func utc(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss 'UTC'"
        return formatter.string(from: date)
    }

    /// `42 s ago`, `5 min ago`, `3 h ago`, `13 days ago`; `in 5 s` for a clock behind.
    static func ago(_ seconds: Double) -> String {
        guard seconds.isFinite else { return "unknown" }
        let magnitude = min(abs(seconds), 1e12)  // a date is at most year 10000: no conversion below can trap
        let text =
            magnitude < 120
            ? "\(Int(magnitude)) s"
            : magnitude < 7200 ? "\(Int(magnitude / 60)) min" : magnitude < 172_800 ? "\(Int(magnitude / 3600)) h" : "\(Int(magnitude / 86400)) days"
        return seconds >= 0 ? "\(text) ago" : "in \(text)"
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
