import LibPQ
import ZoneFeed

extension PostgresSettings: DestinationConfiguration {
    public static let topLevelKeys = ["recordTypes", "schemaEvolution", "unmappedFields", "unknownRecordTypes", "onBadRecord"]

    /// The source's vault is the pipeline's row of `zonefeed_web_auth_tokens` in the schema.
    public func vaultLocation(pipelineName: String) -> String? { "table \(schema).\(WebAuthTokenTable.tableName)" }

    public static func read(_ top: PipelineSection, pipelineName: String?, from file: PipelineFileReader) -> PostgresSettings? {
        let reader = PostgresSettingsReader(file: file)
        let destination = reader.readDestination(in: top, pipelineName: pipelineName)
        let recordTypes = reader.readRecordTypes(in: top)
        let unmappedFields = file.choice(UnmappedFields.self, "unmappedFields", in: top)
        let unknownRecordTypes = file.choice(UnknownRecordTypes.self, "unknownRecordTypes", in: top)
        let onBadRecord = file.choice(OnBadRecord.self, "onBadRecord", in: top)
        let evolution = file.choice(SchemaEvolution.self, "schemaEvolution", in: top)
        guard var settings = destination, let recordTypes else { return nil }
        if recordTypes.auto && evolution == .freeze {
            file.report(
                "recordTypes: auto makes a table for each record type as it appears, which schemaEvolution: freeze forbids: "
                    + "remove schemaEvolution, or map the record types", at: top["schemaEvolution"]!.valuePosition)
            return nil
        }
        settings.recordTypes = recordTypes.mappings
        settings.schemaFile = recordTypes.schemaFile
        settings.autoRecordTypes = recordTypes.auto
        settings.stripsCoreDataPrefix = recordTypes.stripsCoreDataPrefix
        settings.skippedRecordTypes = recordTypes.skipped
        settings.schemaEvolution = evolution ?? defaultSchemaEvolution(schemaFile: recordTypes.schemaFile, auto: recordTypes.auto)
        if let unmappedFields { settings.unmappedFields = unmappedFields }
        if let unknownRecordTypes { settings.unknownRecordTypes = unknownRecordTypes }
        if let onBadRecord { settings.onBadRecord = onBadRecord }
        return settings
    }
}

/// Reads the destination's part of a pipeline file with PostgreSQL's rules: connection strings
/// libpq accepts, identifiers of at most 63 bytes, schemas not starting with `pg_`.
struct PostgresSettingsReader {
    let file: PipelineFileReader

    func readDestination(in top: PipelineSection, pipelineName: String?) -> PostgresSettings? {
        let allowed = ["url", "schema", "deletes", "commitEvery", "parallelZones"]
        guard let section = file.subsection("destination", in: top, allowed: allowed, required: true) else { return nil }
        let reported = file.diagnostics.count

        let url = file.secret("url", in: section, emptyMeansAbsent: false, required: true)
        if let url, let problem = connectionStringProblem(url.value) {
            file.report("\(section.path(of: "url")) \(problem)", at: section["url"]!.valuePosition)
        }

        var schema: String?
        if let value = file.text("schema", in: section, expected: "a schema name") {
            if checkIdentifier(value.text, kind: "schema", at: value.position) {
                if value.text.lowercased().hasPrefix("pg_") {
                    file.report("schema \(InertText.quoted(value.text)) starts with 'pg_', which PostgreSQL reserves for its own schemas", at: value.position)
                } else {
                    schema = value.text
                }
            }
        } else if section["schema"] == nil || file.isNull(section["schema"]!.value), let pipelineName {
            // The default schema is the pipeline name, which must then follow a schema's rules.
            let at = top["pipeline"]?.valuePosition ?? section.position
            if pipelineName.utf8.count > 63 {
                file.report(
                    "the pipeline name is \(pipelineName.utf8.count) bytes long, too long for the schema it names by default (at most 63 bytes): set destination.schema",
                    at: at
                )
            } else if pipelineName.lowercased().hasPrefix("pg_") {
                file.report(
                    "the pipeline name starts with 'pg_', which PostgreSQL reserves for its own schemas: set destination.schema",
                    at: at
                )
            } else {
                schema = pipelineName
            }
        }

        let deletes = file.choice(PostgresSettings.DeleteMode.self, "deletes", in: section)
        let commitEvery = file.integer("commitEvery", in: section, range: PostgresSettings.commitEveryRange)
        let parallelZones = file.integer("parallelZones", in: section, range: PostgresSettings.parallelZonesRange)
        guard file.diagnostics.count == reported, let url, let schema else { return nil }
        return PostgresSettings(
            url: url, schema: schema, deletes: deletes ?? .tombstone, commitEvery: commitEvery ?? PostgresSettings.defaultCommitEvery,
            parallelZones: parallelZones ?? PostgresSettings.defaultParallelZones)
    }

    /// Why libpq would not take this connection string; the sentence never quotes the string.
    func connectionStringProblem(_ url: String) -> String? {
        // Not trimmed: `isEmbedded` compares the exact word, so " embedded" must not pass here.
        let trimmed = url
        if trimmed == "embedded" { return nil }
        let lowered = trimmed.lowercased()
        if trimmed.isEmpty {
            return "is empty: write 'embedded', a postgresql:// URI or a key=value connection string"
        }
        if lowered.hasPrefix("postgresql://") || lowered.hasPrefix("postgres://") {
            // libpq's own sentence may quote the part it could not parse, a password perhaps.
            if Connection.canParse(trimmed) { return nil }
            return "is not a connection URI libpq can parse: check its host, port, percent-encoding and parameters"
        }
        if trimmed.contains("=") && !trimmed.contains("://") {
            if Connection.canParse(trimmed) { return nil }
            // Which pair is wrong, found by the scanner that redaction uses: libpq's own sentence
            // may quote a password.
            let parsed = ConninfoParser.parse(trimmed)
            if let failure = parsed.failure {
                return "is not a valid key=value connection string: \(failure.problem)"
            }
            if let place = parsed.pairs.firstIndex(where: { !ConninfoParser.isParameter($0.key) }) {
                // The key is not quoted: after a space that belonged inside quotes, it is a
                // piece of the password.
                var problem =
                    "is not a valid key=value connection string: the key of its \(ConninfoParser.ordinal(place + 1)) pair is not a libpq parameter"
                if let suggestion = NameSuggestion.closest(to: String(parsed.pairs[place].key), among: Connection.parameterNames) {
                    problem += " (did you mean '\(suggestion)'?)"
                }
                return problem + "; keys that are not libpq's are not shown, as they may be part of a password"
            }
            return "is not a valid key=value connection string: libpq cannot parse it"
        }
        var sentence = "must be 'embedded', a postgresql:// URI or a key=value connection string such as 'host=localhost dbname=app'"
        if NameSuggestion.closest(to: lowered, among: ["embedded"]) != nil { sentence += " (did you mean 'embedded'?)" }
        return sentence
    }
}
