import EmbeddedPostgresServer
import Foundation
import Logging
import ZoneFeed
import ZoneFeedComponents
import ZoneFeedMetrics
import ZoneFeedPostgres

/// What a run of a pipeline would do, for `zonefeed validate`: the source, the destination, each
/// record type's table and columns, and the policies. Tokens and passwords are shown as
/// `<redacted>`.
struct PipelinePlan: CustomStringConvertible {
    let pipeline: Pipeline

    init(_ pipeline: Pipeline) {
        self.pipeline = pipeline
    }

    var description: String {
        let destination = pipeline.postgres
        let recordTypes = destination.recordTypes
        let unmappedFields = destination.unmappedFields
        let unknownRecordTypes = destination.unknownRecordTypes
        let onBadRecord = destination.onBadRecord
        var out: [String] = ["pipeline \(pipeline.name) (\(pipeline.filePath))", ""]
        // A label longer than the column (maxConcurrentRequests) keeps a space after its colon.
        func row(_ label: String, _ value: String) {
            let head = label.isEmpty ? "" : label + ":"
            out.append("  " + head.padding(toLength: max(20, head.count + 1), withPad: " ", startingAt: 0) + value)
        }

        let source = pipeline.source.plan(PlanContext(pipelineName: pipeline.name, vaultLocation: destination.vaultLocation(pipelineName: pipeline.name)))
        out.append(source.heading)
        for r in source.rows { row(r.label, r.value) }

        out.append("")
        out.append("destination: PostgreSQL")
        if destination.isEmbedded {
            // Where a run will put it, which is not always the folder asked for (as root, from a
            // folder the server's account cannot reach); working that out touches nothing.
            let cluster = PostgresSettings.embeddedServer(logger: Logger(label: "zonefeed.validate"))
            row("url", "embedded: a private cluster in \(cluster.whereabouts)")
            row("", "to remove it, with no zonefeed command using it: \(cluster.removalCommand)")
        } else {
            row("url", redactConnectionString(destination.url.value))
        }
        row("schema", destination.schema)
        switch destination.deletes {
        case .tombstone: row("deletes", "tombstone (a deleted record keeps its row, with deleted_at set)")
        case .hard: row("deletes", "hard (a deleted record's row is deleted)")
        }
        row("commitEvery", "\(destination.commitEvery) records per transaction (whole pages only)")
        row(
            "parallelZones",
            destination.parallelZones == 1 ? "1 zone at a time" : "up to \(destination.parallelZones) zones at once, each on its own connection")

        out.append("")
        if destination.autoRecordTypes {
            out.append("record types: auto (a table for each record type as it first appears, a column for each field as it first appears,")
            out.append("  typed by its first value's CloudKit type; the names given are recorded in \(destination.schema).zonefeed_schema_changes)")
        } else if recordTypes.isEmpty {
            let fate = unknownRecordTypes == .skip ? "every record is skipped" : "every record goes to zonefeed_rejects"
            out.append("record types: none mapped (so \(fate): unknownRecordTypes is \(unknownRecordTypes.rawValue))")
        } else {
            if let schemaFile = destination.schemaFile { out.append("record types from the schema file \(schemaFile)") }
            out.append("record types (every table also has the columns \(systemColumns.filter { $0 != "fields" }.joined(separator: ", "))):")
        }
        for mapping in recordTypes {
            let table = "\(destination.schema).\(mapping.table)"
            out.append("  \(mapping.recordType) -> table \(table), view \(table)_live (its rows whose deleted_at is null)")
            let columnWidth = max(mapping.fields.map(\.column.count).max() ?? 0, "fields".count) + 2
            let typeWidth = max(mapping.fields.map(\.type.rawValue.count).max() ?? 0, "jsonb".count) + 2
            func column(_ name: String, _ type: String, _ note: String) {
                out.append(
                    "    " + name.padding(toLength: columnWidth, withPad: " ", startingAt: 0)
                        + (note.isEmpty ? type : type.padding(toLength: typeWidth, withPad: " ", startingAt: 0) + note)
                )
            }
            for field in mapping.fields {
                var notes: [String] = []
                if field.column != field.field { notes.append("field \(field.field)") }
                if field.indexed { notes.append("indexed") }
                column(field.column, field.type.rawValue, notes.isEmpty ? "" : "(\(notes.joined(separator: ", ")))")
            }
            switch (unmappedFields, destination.evolves) {
            case (.keep, false): column("fields", "jsonb", "(the fields not mapped to a column)")
            case (.keep, true): column("fields", "jsonb", "(fields left out by omit; any other new field gets a column)")
            case (.drop, _): column("fields", "jsonb", "(null: unmappedFields is drop)")
            }
            if let renamed = mapping.renamedTable { out.append("    table renamed: \(renamed)") }
            for renamed in mapping.renamed {
                out.append("    column renamed: \(renamed)")
            }
        }

        out.append("")
        out.append("policies:")
        switch destination.schemaEvolution {
        case .evolve:
            row("schemaEvolution", "evolve (a new field becomes a column, a new record type a table, in the batch that brings it)")
            if !destination.skippedRecordTypes.isEmpty {
                row("", "never a table: \(destination.skippedRecordTypes.sorted().joined(separator: ", ")) (skipped)")
            }
            let omitted = recordTypes.filter { !$0.omittedFields.isEmpty }
            for mapping in omitted {
                row("", "never a column: \(mapping.omittedFields.sorted().map { "\(mapping.recordType).\($0)" }.joined(separator: ", ")) (omitted)")
            }
        case .freeze: row("schemaEvolution", "freeze (the tables keep their columns; other fields go to the fields column)")
        }
        switch unmappedFields {
        case .keep: row("unmappedFields", destination.evolves ? "keep (omitted fields in the fields jsonb column)" : "keep (in the fields jsonb column)")
        case .drop: row("unmappedFields", "drop")
        }
        switch unknownRecordTypes {
        case _ where destination.evolves: row("unknownRecordTypes", "\(unknownRecordTypes.rawValue) (unused: every record type gets a table)")
        case .skip: row("unknownRecordTypes", "skip (records of other types are not written)")
        case .reject: row("unknownRecordTypes", "reject (records of other types go to zonefeed_rejects)")
        }
        switch onBadRecord {
        case .reject: row("onBadRecord", "reject (to zonefeed_rejects; the run goes on)")
        case .fail: row("onBadRecord", "fail (the run stops)")
        }
        if let metrics = pipeline.section(MetricsSettings.self) {
            out.append("")
            out.append("metrics (at the end of each run; run's --metrics-file and --pushgateway win):")
            if let file = metrics.file { row("file", "\(file) (Prometheus text format, for node_exporter's textfile collector)") }
            if let gateway = metrics.pushgateway {
                row("pushgateway", "\(MetricsSettings.redacted(gateway)) as job=\"\(metrics.job)\", pipeline=\"\(pipeline.name)\"")
            }
        }
        // Each line is ours; a value in it from the file (a zone's name, a path, a table's
        // name) is escaped, so that no control character it holds reaches the terminal.
        return out.map { InertText.escaped($0) }.joined(separator: "\n")
    }
}
