import ArgumentParser
import Foundation
import ZoneFeed

struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show the checkpoints (zone, token, generation, counts), the last runs and the last changes of shape.")

    @OptionGroup var options: PipelineOptions

    func run() async throws {
        let pipeline = try options.loadPipeline()
        let logger = options.makeLogger()
        let (status, aboutSource) = try await options.askingDestination(pipeline, logger: logger) { destination in
            (try await destination.status(), await sourceLines(pipeline, vault: destination.sourceVault))
        }
        guard status.tablesExist, !(status.zones.isEmpty && status.runs.isEmpty) else {
            printLine("pipeline \(pipeline.name): no runs yet (run: zonefeed run \(InertText.escaped(options.pipelineFile)))")
            for line in aboutSource { printLine(line) }
            return
        }
        printLine("pipeline \(pipeline.name) (\(InertText.escaped(status.place)))")
        for line in aboutSource { printLine(line) }
        for line in status.notes { printLine(InertText.escaped(line)) }
        printLine("")
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
        printLine(Self.table(rows))
        printLine("")
        var runs = [["run", "status", "started", "finished", "pages", "upserts", "tombstones", "rejects", "throttled", "error"]]
        for r in status.runs {
            runs.append([
                String(r.runID), r.status, r.startedAt, r.finishedAt ?? "", Int(r.pages).grouped, Int(r.upserts).grouped,
                Int(r.tombstones).grouped, Int(r.rejects).grouped, String(format: "%.1f s", r.throttledSeconds), r.error ?? "",
            ])
        }
        printLine(Self.table(runs))
        for table in status.tables {
            printLine("")
            printLine(InertText.escaped(table.title))
            printLine(Self.table(table.rows))
        }
    }

    /// What the source says of itself under the heading (a CloudKit source: its stored web
    /// auth token's user and times). `vault` is what the destination keeps for the source.
    func sourceLines(_ pipeline: Pipeline, vault: (any SourceVault)?) async -> [String] {
        let file = options.pipelineFile
        return await pipeline.source.statusLines(
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
