import LibPQ
import Logging
import ZoneFeed

/// What `zonefeed validate` shows of the PostgreSQL destination (the server, the schema, each
/// record type's table and columns, the policies), the DDL a run executes, and where a run's
/// summary points to look at what it wrote.
extension PostgresSettings {
    public func plan(_ context: PlanContext) -> [String] {
        var out: [String] = []
        func row(_ label: String, _ value: String) { out.append(PlanSection.line(label, value)) }
        out.append("destination: PostgreSQL")
        if isEmbedded {
            // Where a run will put it, which is not always the folder asked for (as root, from a
            // folder the server's account cannot reach); working that out touches nothing.
            let cluster = Self.embeddedServer(logger: Logger(label: "zonefeed.validate"))
            row("url", "embedded: a private cluster in \(cluster.whereabouts)")
            row("", "to remove it, with no zonefeed command using it: \(cluster.removalCommand)")
        } else {
            row("url", redactConnectionString(url.value))
        }
        row("schema", schema)
        switch deletes {
        case .tombstone: row("deletes", "tombstone (a deleted record keeps its row, with deleted_at set)")
        case .hard: row("deletes", "hard (a deleted record's row is deleted)")
        }
        row("commitEvery", "\(commitEvery) records per transaction (whole pages only)")
        row("commitEveryBytes", "\(commitEveryBytes) bytes of pages per transaction, as they came (whole pages only)")
        row(
            "parallelZones",
            parallelZones == 1 ? "1 zone at a time" : "up to \(parallelZones) zones at once, each on its own connection; a zone alone also on an idle one")

        out.append("")
        if autoRecordTypes {
            out.append("record types: auto (a table for each record type as it first appears, a column for each field as it first appears,")
            out.append("  typed by its first value's CloudKit type; the names given are recorded in \(schema).zonefeed_schema_changes)")
        } else if recordTypes.isEmpty {
            let fate = policies.unknownRecordTypes == .skip ? "every record is skipped" : "every record goes to zonefeed_rejects"
            out.append("record types: none mapped (so \(fate): unknownRecordTypes is \(policies.unknownRecordTypes.rawValue))")
        } else {
            if let schemaFile = schemaFile { out.append("record types from the schema file \(schemaFile)") }
            out.append("record types (every table also has the columns \(systemColumns.filter { $0 != "fields" }.joined(separator: ", "))):")
        }
        for mapping in recordTypes {
            let table = "\(schema).\(mapping.table)"
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
            switch (policies.unmappedFields, evolves) {
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
        switch policies.schemaEvolution {
        case .evolve:
            row("schemaEvolution", "evolve (a new field becomes a column, a new record type a table, in the batch that brings it)")
            if !skippedRecordTypes.isEmpty {
                row("", "never a table: \(skippedRecordTypes.sorted().joined(separator: ", ")) (skipped)")
            }
            let omitted = recordTypes.filter { !$0.omittedFields.isEmpty }
            for mapping in omitted {
                row("", "never a column: \(mapping.omittedFields.sorted().map { "\(mapping.recordType).\($0)" }.joined(separator: ", ")) (omitted)")
            }
        case .freeze: row("schemaEvolution", "freeze (the tables keep their columns; other fields go to the fields column)")
        }
        switch policies.unmappedFields {
        case .keep: row("unmappedFields", evolves ? "keep (omitted fields in the fields jsonb column)" : "keep (in the fields jsonb column)")
        case .drop: row("unmappedFields", "drop")
        }
        switch policies.unknownRecordTypes {
        case _ where evolves: row("unknownRecordTypes", "\(policies.unknownRecordTypes.rawValue) (unused: every record type gets a table)")
        case .skip: row("unknownRecordTypes", "skip (records of other types are not written)")
        case .reject: row("unknownRecordTypes", "reject (records of other types go to zonefeed_rejects)")
        }
        switch policies.onBadRecord {
        case .reject: row("onBadRecord", "reject (to zonefeed_rejects; the run goes on)")
        case .fail: row("onBadRecord", "fail (the run stops)")
        }
        return out
    }

    public func setup(pipelineName: String) -> DestinationSetup? {
        DestinationSetup(
            heading: "-- DDL a run executes (each statement is idempotent):",
            statements: PostgresSchema(pipelineName: pipelineName, settings: self).ddl.map { $0 + ";" })
    }

    /// A query on the first record type's live view, and on the rejects when there were some.
    /// The SQL goes to `command` as one argument, which it quotes for the shell: a table named
    /// `x';touch /tmp/p;'` ended the hint's quotes, and pasting the hint ran the rest.
    public func summaryHints(rejects: Int, command: (_ subcommand: String, _ arguments: [String]) -> String) -> [String] {
        var lines: [String] = []
        if let table = recordTypes.first {
            let view = "\(Self.sqlName(schema)).\(Self.sqlName(table.table + "_live"))"
            lines.append("Query it:    \(command("psql", ["-c", "SELECT count(*) FROM \(view)"]))")
        }
        if rejects > 0 {
            let sql = "SELECT record_name, error FROM \(Self.sqlName(schema)).zonefeed_rejects ORDER BY id DESC LIMIT 20"
            lines.append("Rejects:     \(command("psql", ["-c", sql]))")
        }
        return lines
    }

    /// An identifier as it must be written in a hint's SQL: bare when PostgreSQL would read it
    /// unchanged, double-quoted otherwise.
    static func sqlName(_ name: String) -> String {
        let plain =
            name.first.map { $0.isLowercase || $0 == "_" } == true
            && name.allSatisfy { ($0.isLowercase || $0.isNumber || $0 == "_") && $0.isASCII }
        return plain ? name : quoteIdentifier(name)
    }
}
