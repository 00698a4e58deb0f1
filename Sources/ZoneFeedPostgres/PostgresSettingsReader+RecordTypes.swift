import ZoneFeed

extension PostgresSettingsReader {
    func readRecordTypes(in top: PipelineSection) -> RecordTypesSetting? {
        guard let entry = top["recordTypes"], !file.isNull(entry.value) else { return RecordTypesSetting() }
        if file.isMapping(entry.value, withKey: "schemaFile") {
            return readSchemaFileMapping(entry)
        }
        if case .scalar = entry.value {
            let expected = "auto, a mapping of record type names to tables, or { schemaFile: ... }"
            guard let value = file.scalarValue(entry.value, path: "recordTypes", expected: expected) else { return nil }
            guard value.text == "auto" else {
                file.report("recordTypes must be \(expected), not \(InertText.quoted(value.text))", at: value.position)
                return nil
            }
            return RecordTypesSetting(auto: true)
        }
        return readExplicitRecordTypes(entry).map { RecordTypesSetting(mappings: $0) }
    }

    func readExplicitRecordTypes(_ entry: PipelineEntry) -> [PostgresRecordTypeMapping]? {
        guard let pairs = file.entries(of: entry.value, path: "recordTypes", what: "a mapping of record type names to tables")
        else { return nil }
        guard pairs.count <= PostgresSchema.maxMappedTables else {
            file.report(PostgresSettingsReader.tooManyTables(pairs.count, what: "recordTypes maps"), at: entry.keyPosition)
            return nil
        }

        var mappings: [PostgresRecordTypeMapping] = []
        var failed = false
        // Lower-cased, because an unquoted identifier folds to lower case in PostgreSQL.
        var tableOwners: [String: String] = [:]
        for recordType in pairs {
            guard let mapping = readRecordType(recordType) else {
                failed = true
                continue
            }
            let table = mapping.table
            let at = table.position
            if let owner = tableOwners[table.name.lowercased()] {
                file.report("table \(InertText.quoted(table.name)) of record type \(recordType.key) is already used by record type \(owner)", at: at)
                failed = true
                continue
            }
            tableOwners[table.name.lowercased()] = recordType.key
            if mapping.mapping.fields.count > PostgresSchema.maxMappedFields {
                file.report(
                    "record type \(recordType.key) maps \(mapping.mapping.fields.count) fields, and its table can have at most "
                        + "\(PostgresSchema.maxMappedFields) (PostgreSQL's 1600 columns, less zonefeed's own): map fewer, and leave the rest to the fields column",
                    at: recordType.keyPosition)
                failed = true
                continue
            }
            mappings.append(mapping.mapping)
        }
        return failed ? nil : mappings
    }

    func readRecordType(_ entry: PipelineEntry) -> (mapping: PostgresRecordTypeMapping, table: (name: String, position: PipelinePosition))? {
        let recordType = entry.key
        let path = "recordTypes.\(recordType)"
        if recordType.isEmpty {
            file.report("a record type name in recordTypes is empty", at: entry.keyPosition)
            return nil
        }
        guard
            let section = file.section(
                entry.value, path: path, position: entry.keyPosition, allowed: PostgresSettings.reference.keys.keys(in: "recordTypes.<RecordType>"))
        else { return nil }
        let reported = file.diagnostics.count

        var table = recordType.snakeCased
        var tablePosition = entry.keyPosition
        if let value = file.text("table", in: section, expected: "a table name") {
            table = value.text
            tablePosition = value.position
        }
        if file.diagnostics.count == reported {
            _ = checkTable(table, of: recordType, at: tablePosition)
        }

        let fields = readFields(in: section, recordType: recordType, table: table)
        guard file.diagnostics.count == reported, let fields else { return nil }
        return (PostgresRecordTypeMapping(recordType: recordType, table: table, fields: fields), (table, tablePosition))
    }

    func readFields(in recordType: PipelineSection, recordType name: String, table: String) -> [PostgresFieldMapping]? {
        guard let entry = recordType["fields"], !file.isNull(entry.value) else { return [] }
        let path = recordType.path(of: "fields")
        guard let pairs = file.entries(of: entry.value, path: path, what: "a mapping of field names to column types") else {
            return nil
        }
        var fields: [PostgresFieldMapping] = []
        var failed = false
        var columnOwners: [String: String] = [:]
        let system = Set(systemColumns)
        for field in pairs {
            if field.key.isEmpty {
                file.report("a field name in \(path) is empty", at: field.keyPosition)
                failed = true
                continue
            }
            guard let (mapping, columnPosition) = readField(field, path: "\(path).\(field.key)") else {
                failed = true
                continue
            }
            let column = mapping.column
            if !checkIdentifier(column, kind: "column", owner: "of field \(field.key)", at: columnPosition) {
                failed = true
                continue
            }
            if system.contains(column.lowercased()) {
                file.report(
                    "column \(InertText.quoted(column)) of field \(field.key) clashes with the system column \(column.lowercased()) that every record table has: map the field to another column with { column: ..., type: ... }",
                    at: columnPosition
                )
                failed = true
                continue
            }
            if postgresSystemColumns.contains(column) {
                file.report(
                    "column '\(column)' of field \(field.key) is the name of one of PostgreSQL's system columns, which no table may have a column of: map the field to another column with { column: ..., type: ... }",
                    at: columnPosition)
                failed = true
                continue
            }
            if column.lowercased() == stagingSequenceColumn {
                file.report(
                    "column \(InertText.quoted(column)) of field \(field.key) is the name zonefeed's staging tables keep for the batch order: map the field to another column with { column: ..., type: ... }",
                    at: columnPosition)
                failed = true
                continue
            }
            if mapping.indexed && !mapping.type.isIndexable {
                file.report(
                    "field \(field.key) asks for an index on a \(mapping.type.rawValue) column; zonefeed indexes text, bigint, double precision, timestamptz and boolean columns only",
                    at: columnPosition)
                failed = true
                continue
            }
            if let owner = columnOwners[column.lowercased()] {
                file.report("column \(InertText.quoted(column)) of field \(field.key) is already used by field \(owner) in table \(table)", at: columnPosition)
                failed = true
                continue
            }
            columnOwners[column.lowercased()] = field.key
            fields.append(mapping)
        }
        return failed ? nil : fields
    }

    /// `title: text`, or `body: { column: body_text, type: text }` (and `index: true` for a
    /// b-tree index on the column).
    func readField(_ entry: PipelineEntry, path: String) -> (PostgresFieldMapping, columnPosition: PipelinePosition)? {
        let field = entry.key
        let expected = "a column type such as text, or a mapping { column: ..., type: ... }"
        switch entry.value {
        case _ where file.isNull(entry.value):
            file.report("field \(field) has no type: write '\(field): text' or '\(field): { column: ..., type: ... }'", at: entry.keyPosition)
            return nil
        case .scalar:
            guard let typeName = file.scalarValue(entry.value, path: path, expected: expected),
                let type = columnType(typeName, field: field)
            else { return nil }
            return (PostgresFieldMapping(field: field, column: field.snakeCased, type: type), entry.keyPosition)
        case .mapping:
            guard
                let section = file.section(
                    entry.value, path: path, position: entry.keyPosition,
                    allowed: PostgresSettings.reference.keys.keys(in: "recordTypes.<RecordType>.fields.<field>"))
            else { return nil }
            let reported = file.diagnostics.count
            let column = file.text("column", in: section, expected: "a column name")
            let indexed = file.boolean("index", in: section) ?? false
            guard let typeName = file.text("type", in: section, expected: "a column type such as text", required: true),
                let type = columnType(typeName, field: field), file.diagnostics.count == reported
            else { return nil }
            return (
                PostgresFieldMapping(field: field, column: column?.text ?? field.snakeCased, type: type, indexed: indexed),
                column?.position ?? entry.keyPosition
            )
        default:
            file.report("\(path) must be \(expected), not \(file.kindName(entry.value))", at: entry.valuePosition)
            return nil
        }
    }

    func columnType(_ value: PipelineValue, field: String) -> ColumnType? {
        if let type = ColumnType(name: value.text) { return type }
        let names = ColumnType.allCases.map(\.rawValue) + ColumnType.aliases.keys.sorted()
        if let suggestion = NameSuggestion.closest(to: value.text.trimmingSpaces(), among: names) {
            file.report("unknown type \(InertText.quoted(value.text)) for field \(field) (did you mean '\(suggestion)'?)", at: value.position)
        } else {
            let expected = ColumnType.allCases.map(\.rawValue).joined(separator: ", ")
            file.report("unknown type \(InertText.quoted(value.text)) for field \(field) (expected one of \(expected))", at: value.position)
        }
        return nil
    }

    // MARK: Identifiers

    /// A table name of at most 58 bytes (its view `<table>_live` must fit in 63), neither
    /// `zonefeed_…` nor `…_live`.
    func checkTable(_ table: String, of recordType: String, at position: PipelinePosition) -> Bool {
        let limit = 63 - "_live".utf8.count
        let why = "at most \(limit) bytes, so that its view \(table)_live stays within PostgreSQL's 63"
        if !checkIdentifier(table, kind: "table", owner: "of record type \(recordType)", at: position, maxBytes: limit, why: why) {
            return false
        } else if table.lowercased().hasPrefix("zonefeed_") {
            file.report(
                "table \(InertText.quoted(table)) of record type \(recordType) starts with 'zonefeed_', which is reserved for zonefeed's own tables",
                at: position)
            return false
        } else if table.lowercased().hasSuffix("_live") {
            file.report(
                "table \(InertText.quoted(table)) of record type \(recordType) ends with '_live', which is reserved for the views of live rows", at: position)
            return false
        } else if table.lowercased().hasSuffix("_pkey") {
            file.report(
                "table \(InertText.quoted(table)) of record type \(recordType) ends with '_pkey', which PostgreSQL gives the index of a table's primary key",
                at: position)
            return false
        }
        return true
    }

    /// PostgreSQL truncates longer names silently (NAMEDATALEN is 64), and a NUL cannot cross
    /// libpq's C strings: both would make a table or column other than the one the file names.
    /// `kind` and `owner` make the sentence: "column" "of field title".
    func checkIdentifier(
        _ name: String, kind: String, owner: String = "", at position: PipelinePosition, maxBytes: Int = 63, why: String? = nil
    ) -> Bool {
        let owner = owner.isEmpty ? "" : " \(owner)"
        if name.isEmpty {
            file.report("\(kind) name\(owner) is empty", at: position)
            return false
        }
        if name.unicodeScalars.contains("\0") {
            file.report("\(kind) name\(owner) contains a NUL character", at: position)
            return false
        }
        // PostgreSQL takes any other character in a quoted name, but a control character in
        // a table or column name is a mistake, and would reach terminals in plans and status.
        if let control = name.unicodeScalars.first(where: { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }) {
            let code = String(control.value, radix: 16, uppercase: true)
            file.report(
                "\(kind) name \(InertText.quoted(name))\(owner) holds a control character (U+\(String(repeating: "0", count: 4 - code.count))\(code))",
                at: position)
            return false
        }
        let bytes = name.utf8.count
        if bytes > maxBytes {
            file.report(
                "\(kind) \(InertText.quoted(name))\(owner) is \(bytes.grouped) bytes long: \(why ?? "PostgreSQL names are at most \(maxBytes) bytes")",
                at: position
            )
            return false
        }
        return true
    }
}
