import CloudKitSchema
import Foundation
import ZoneFeed

extension PostgresSettingsReader {
    /// `recordTypes: { schemaFile: …, stripCoreDataPrefix, indexes, skip, override }` (see
    /// `SchemaFileMapping`). A schema file that does not parse is reported at its own line and
    /// column; an override that names a record type or field the file lacks, at the override.
    func readSchemaFileMapping(_ entry: PipelineEntry) -> RecordTypesSetting? {
        let allowed = PostgresSettings.reference.keys.keys(in: "recordTypes").filter { $0 != "<RecordType>" }
        guard let section = file.section(entry.value, path: "recordTypes", position: entry.keyPosition, allowed: allowed) else { return nil }
        let reported = file.diagnostics.count
        var options = SchemaFileMapping()
        if let strip = file.boolean("stripCoreDataPrefix", in: section) { options.stripCoreDataPrefix = strip }
        if let indexes = file.choice(SchemaFileMapping.Indexes.self, "indexes", in: section) { options.indexes = indexes }
        if let skip = file.stringList("skip", in: section, expected: "a list of record type names") { options.skip = Set(skip) }
        guard let path = file.text("schemaFile", in: section, expected: "the path of a .ckdb file", required: true),
            let (schema, resolved) = readSchemaFile(path)
        else { return nil }

        // Looked up by name once made: the schema's own lookup searches its list, and a skip
        // list or overrides of 100,000 names over a schema of as many types took hours.
        let definitions = Dictionary(schema.recordTypes.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        let typeNames = schema.recordTypes.map(\.name)
        for name in options.skip.sorted() where definitions[name] == nil {
            file.report(
                "recordTypes.skip names record type \(name), which \(path.text) does not define\(suggestion(name, typeNames))",
                at: section["skip"]!.valuePosition)
        }
        if let overrides = section["override"], !file.isNull(overrides.value) {
            options.overrides = readOverrides(overrides, schema: schema, definitions: definitions, schemaPath: path.text, options: options)
        }
        guard file.diagnostics.count == reported else { return nil }
        let mappings = options.mappings(from: schema)
        guard mappings.count <= PostgresSchema.maxMappedTables else {
            file.report(
                PostgresSettingsReader.tooManyTables(mappings.count, what: "\(path.text) defines record types for") + " (recordTypes.skip)",
                at: path.position)
            return nil
        }
        var indexes: [String: Set<String>] = [:]
        for mapping in mappings where mapping.fields.count > PostgresSchema.maxMappedFields {
            let at = definitions[mapping.recordType]?.position ?? SchemaPosition(line: 0, column: 0)
            file.report(
                PipelineDiagnostic(
                    file: resolved, line: at.line, column: at.column,
                    message: "record type \(mapping.recordType) has \(mapping.fields.count) fields, and its table can have at most "
                        + "\(PostgresSchema.maxMappedFields) (PostgreSQL's 1600 columns, less zonefeed's own): omit some "
                        + "(recordTypes.override.\(mapping.recordType).fields.<field>: omit)"))
        }
        guard file.diagnostics.count == reported else { return nil }
        for mapping in mappings {
            indexes[mapping.recordType] = Set(
                (definitions[mapping.recordType]?.systemFields ?? []).flatMap { field in
                    [(FieldOptions.queryable, "QUERYABLE"), (.sortable, "SORTABLE"), (.searchable, "SEARCHABLE")]
                        .filter { field.options.contains($0.0) }.map { "\(field.name) \($0.1)" }
                })
        }
        return RecordTypesSetting(
            mappings: mappings, schemaFile: resolved, stripsCoreDataPrefix: options.stripCoreDataPrefix, skipped: options.skip,
            systemIndexes: indexes)
    }

    /// The schema file, relative to the pipeline file's folder unless absolute.
    func readSchemaFile(_ path: PipelineValue) -> (CloudKitSchema, resolved: String)? {
        let resolved =
            path.text.hasPrefix("/")
            ? path.text : URL(fileURLWithPath: file.filePath).deletingLastPathComponent().appendingPathComponent(path.text).relativePath
        do {
            return (try CloudKitSchema(contentsOfFile: resolved), resolved)
        } catch {
            if let syntax = error.syntax {
                file.report(PipelineDiagnostic(file: resolved, line: syntax.position.line, column: syntax.position.column, message: syntax.message))
            } else {
                file.report("recordTypes.schemaFile: cannot read \(resolved): \(error.reason)", at: path.position)
            }
            return nil
        }
    }

    func readOverrides(
        _ entry: PipelineEntry, schema: CloudKitSchema, definitions: [String: RecordTypeDefinition], schemaPath: String, options: SchemaFileMapping
    ) -> [String: SchemaFileMapping.Override] {
        guard let pairs = file.entries(of: entry.value, path: "recordTypes.override", what: "a mapping of record type names to their overrides") else {
            return [:]
        }
        var overrides: [String: SchemaFileMapping.Override] = [:]
        var tableOwners: [String: String] = [:]
        let typeNames = schema.recordTypes.map(\.name)
        for pair in pairs {
            let path = "recordTypes.override.\(pair.key)"
            guard let recordType = definitions[pair.key] else {
                file.report(
                    "\(path): \(schemaPath) defines no record type \(pair.key)\(suggestion(pair.key, typeNames))", at: pair.keyPosition)
                continue
            }
            if options.skip.contains(pair.key) {
                file.report("\(path): record type \(pair.key) is also in recordTypes.skip, so it gets no table to override", at: pair.keyPosition)
                continue
            }
            guard
                let section = file.section(
                    pair.value, path: path, position: pair.keyPosition, allowed: PostgresSettings.reference.keys.keys(in: "recordTypes.override.<RecordType>"))
            else { continue }
            var override = SchemaFileMapping.Override()
            if let table = file.text("table", in: section, expected: "a table name"), checkTable(table.text, of: pair.key, at: table.position) {
                if let owner = tableOwners[table.text.lowercased()] {
                    file.report("table \(InertText.quoted(table.text)) of record type \(pair.key) is already used by record type \(owner)", at: table.position)
                }
                tableOwners[table.text.lowercased()] = pair.key
                override.table = table.text
            }
            if let fields = section["fields"], !file.isNull(fields.value) {
                override.fields = readFieldOverrides(fields, path: "\(path).fields", recordType: recordType, schemaPath: schemaPath)
            }
            overrides[pair.key] = override
        }
        return overrides
    }

    /// `field: omit`, or `field: { column: …, type: … }` (either or both).
    func readFieldOverrides(
        _ entry: PipelineEntry, path: String, recordType: RecordTypeDefinition, schemaPath: String
    ) -> [String: SchemaFileMapping.FieldOverride] {
        guard let pairs = file.entries(of: entry.value, path: path, what: "a mapping of field names to 'omit' or { column: ..., type: ... }") else {
            return [:]
        }
        var fields: [String: SchemaFileMapping.FieldOverride] = [:]
        var columnOwners: [String: String] = [:]
        let system = Set(systemColumns)
        let fieldNames = recordType.fields.map(\.name)
        let defined = Set(fieldNames)
        for pair in pairs {
            guard defined.contains(pair.key) else {
                file.report(
                    "\(path): record type \(recordType.name) in \(schemaPath) has no field \(pair.key)\(suggestion(pair.key, fieldNames))",
                    at: pair.keyPosition)
                continue
            }
            if case .scalar = pair.value, let value = file.scalarValue(pair.value, path: "\(path).\(pair.key)", expected: "omit") {
                if value.text == "omit" {
                    fields[pair.key] = .omit
                } else {
                    file.report("\(path).\(pair.key) must be 'omit' or { column: ..., type: ... }, not \(InertText.quoted(value.text))", at: value.position)
                }
                continue
            }
            guard
                let section = file.section(
                    pair.value, path: "\(path).\(pair.key)", position: pair.keyPosition,
                    allowed: PostgresSettings.reference.keys.keys(in: "recordTypes.override.<RecordType>.fields.<field>"))
            else {
                continue
            }
            let type = file.text("type", in: section, expected: "a column type such as text").flatMap { columnType($0, field: pair.key) }
            let column = file.text("column", in: section, expected: "a column name")
            if let column {
                guard checkIdentifier(column.text, kind: "column", owner: "of field \(pair.key)", at: column.position) else { continue }
                if system.contains(column.text.lowercased()) || column.text.lowercased() == stagingSequenceColumn
                    || postgresSystemColumns.contains(column.text)
                {
                    file.report(
                        "column \(InertText.quoted(column.text)) of field \(pair.key) clashes with the system column \(column.text.lowercased())",
                        at: column.position)
                    continue
                }
                if let owner = columnOwners[column.text.lowercased()] {
                    file.report("column \(InertText.quoted(column.text)) of field \(pair.key) is already used by field \(owner)", at: column.position)
                    continue
                }
                columnOwners[column.text.lowercased()] = pair.key
            }
            fields[pair.key] = .column(name: column?.text, type: type)
        }
        return fields
    }

    /// A close name to suggest, for the first few mistakes only: each is an edit distance to
    /// every candidate, and a file of 100,000 unknown names over a schema of as many types took
    /// hours to refuse.
    func suggestion(_ name: String, _ candidates: [String]) -> String {
        guard file.diagnostics.count < 50 else { return "" }
        return NameSuggestion.closest(to: name, among: candidates).map { " (did you mean \($0)?)" } ?? ""
    }

    /// The sentence for a mapping of `count` tables, more than `PostgresSchema.maxMappedTables`.
    static func tooManyTables(_ count: Int, what: String) -> String {
        "\(what) \(count) tables, and a pipeline may map at most \(PostgresSchema.maxMappedTables): a run makes the missing ones in one "
            + "transaction, and PostgreSQL's lock table (6,400 locks by default, about four a table) runs out; map fewer, or split "
            + "the record types across pipelines"
    }
}
