import LibPQ
import RecordMapping
import ZoneFeed

extension PostgresSettings: DestinationConfiguration {
    /// A `destination:` with a `url` is PostgreSQL.
    public static let key = "url"
    public static let topLevelKeys = reference.keys.keys(in: "").filter { $0 != "destination" }

    /// The source's vault is the pipeline's row of `zonefeed_web_auth_tokens` in the schema.
    public func vaultLocation(pipelineName: String) -> String? { "table \(schema).\(WebAuthTokenTable.tableName)" }

    /// The types written out or derived from the schema file; none with `recordTypes: auto`.
    public var mappedRecordTypes: [String]? { autoRecordTypes ? nil : recordTypes.map(\.recordType) }

    public var mappedFields: [String: [String]]? {
        autoRecordTypes ? nil : Dictionary(recordTypes.map { ($0.recordType, $0.fields.map(\.field)) }, uniquingKeysWith: +)
    }

    public var declaredIndexes: [String: Set<String>]? { declaredSystemIndexes }

    public static func read(_ top: PipelineSection, pipelineName: String?, from file: PipelineFileReader) -> PostgresSettings? {
        let reader = PostgresSettingsReader(file: file)
        let destination = reader.readDestination(in: top, pipelineName: pipelineName)
        let recordTypes = reader.readRecordTypes(in: top)
        let policies = RecordMappingPolicies.read(in: top, from: file, schemaFile: recordTypes?.schemaFile, auto: recordTypes?.auto ?? false)
        guard var settings = destination, let recordTypes, let policies else { return nil }
        settings.recordTypes = recordTypes.mappings
        settings.schemaFile = recordTypes.schemaFile
        settings.autoRecordTypes = recordTypes.auto
        settings.stripsCoreDataPrefix = recordTypes.stripsCoreDataPrefix
        settings.skippedRecordTypes = recordTypes.skipped
        settings.declaredSystemIndexes = recordTypes.systemIndexes
        settings.policies = policies
        return settings
    }
}

/// Reads the destination's part of a pipeline file with PostgreSQL's rules: connection strings
/// libpq accepts, identifiers of at most 63 bytes, schemas not starting with `pg_`.
struct PostgresSettingsReader {
    let file: PipelineFileReader

    func readDestination(in top: PipelineSection, pipelineName: String?) -> PostgresSettings? {
        let allowed = PostgresSettings.reference.keys.keys(in: "destination")
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
        let commitEveryBytes = file.integer("commitEveryBytes", in: section, range: PostgresSettings.commitEveryBytesRange)
        let parallelZones = file.integer("parallelZones", in: section, range: PostgresSettings.parallelZonesRange)
        guard file.diagnostics.count == reported, let url, let schema else { return nil }
        var settings = PostgresSettings(
            url: url, schema: schema, deletes: deletes ?? .tombstone, commitEvery: commitEvery ?? PostgresSettings.defaultCommitEvery,
            parallelZones: parallelZones ?? PostgresSettings.defaultParallelZones)
        if let commitEveryBytes { settings.commitEveryBytes = commitEveryBytes }
        return settings
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
            // libpq ends the user name and password at the first '@': with another after it,
            // the rest of the password is taken for the host, which its errors then print
            // ("could not translate host name \"rd@db\"").
            let afterScheme = trimmed.utf8.drop { $0 != UInt8(ascii: "/") }.dropFirst(2)
            let authority = afterScheme.prefix { $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: "?") }
            if authority.filter({ $0 == UInt8(ascii: "@") }).count > 1 {
                return "has more than one '@' before its host: percent-encode an '@' in the user name or password as %40"
            }
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

extension PostgresSettings {
    /// Every key the PostgreSQL destination reads, for `zonefeed config reference`; its readers
    /// take no other. `<RecordType>` and `<field>` stand for names.
    public static let reference = PipelineReference(
        component: "destination (ZoneFeedPostgres)",
        keys: [
            .section("destination", default: "required", "The PostgreSQL database the rows and checkpoints go to."),
            PipelineKey(
                "destination.url", takes: "'embedded', a postgresql:// URI or a key=value connection string", default: "required",
                "Anything libpq accepts (PG* variables and PGPASSFILE work), or embedded: a private cluster under .zonefeed/postgres."),
            PipelineKey("destination.schema", takes: "a schema name", default: "the pipeline name", "The schema of the tables, checkpoints and runs."),
            .choice("destination.deletes", DeleteMode.self, default: "tombstone", "A deleted record's row: kept with deleted_at set, or deleted."),
            .integer(
                "destination.commitEvery", commitEveryRange, default: defaultCommitEvery, "Records per transaction, whole pages only."),
            .integer(
                "destination.commitEveryBytes", commitEveryBytesRange, default: Runner.Configuration.defaultCommitEveryBytes,
                "Bytes of pages per transaction, as they came, whole pages only: large records commit before commitEvery of them are held."),
            .integer(
                "destination.parallelZones", parallelZonesRange, default: defaultParallelZones,
                "Connections writing at once: a zone on each, and a zone alone also on an idle one, its next batch beside the last."),
            PipelineKey(
                "recordTypes", takes: "auto, a mapping of record type names to tables, or { schemaFile: ... }", default: "none mapped",
                "How records become rows (docs/pipeline-file.md)."),
            .section("recordTypes.<RecordType>", "A record type written out: its table and columns."),
            PipelineKey("recordTypes.<RecordType>.table", takes: "a table name", default: "the record type in snake_case", "The table."),
            PipelineKey(
                "recordTypes.<RecordType>.fields", takes: "a mapping of field names to a column type or { column, type, index }",
                default: "none: every field in the fields jsonb column", "The columns."),
            PipelineKey(
                "recordTypes.<RecordType>.fields.<field>.column", takes: "a column name", default: "the field in snake_case", "The field's column."),
            PipelineKey(
                "recordTypes.<RecordType>.fields.<field>.type", takes: "a column type such as text", default: "required", "The column's type."),
            .boolean("recordTypes.<RecordType>.fields.<field>.index", default: false, "An index on the column."),
            PipelineKey(
                "recordTypes.schemaFile", takes: "the path of a .ckdb file", default: "required in this form",
                "Tables from a CloudKit schema file, relative to the pipeline file."),
            .boolean("recordTypes.stripCoreDataPrefix", default: false, "Core Data's CD_ prefix is left out of table and column names."),
            .choice(
                "recordTypes.indexes", SchemaFileMapping.Indexes.self, default: "none", "queryable: an index on each QUERYABLE or SORTABLE field."),
            PipelineKey("recordTypes.skip", takes: "a list of record type names", default: "none", "Record types given no table."),
            .section("recordTypes.override", "Per record type of the schema file, all optional."),
            .section("recordTypes.override.<RecordType>", "One record type's changes."),
            PipelineKey("recordTypes.override.<RecordType>.table", takes: "a table name", "Its table."),
            PipelineKey(
                "recordTypes.override.<RecordType>.fields", takes: "a mapping of field names to omit or { column, type }",
                "omit keeps a field in the fields jsonb column."),
            PipelineKey("recordTypes.override.<RecordType>.fields.<field>.column", takes: "a column name", "The field's column."),
            PipelineKey("recordTypes.override.<RecordType>.fields.<field>.type", takes: "a column type such as text", "The column's type."),
        ] + RecordMappingPolicies.referenceKeys)
}
