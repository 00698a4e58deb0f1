import CloudKitModel

/// What a batch brought that the tables lack: record types without a table and fields without
/// a column, each field with the CloudKit type of its first value, in the order they were met.
/// Thrown when found; the batch is then applied again, with the changes, in one transaction.
struct SchemaGrowth: Error {
    /// The zone whose batch brought it (for the changes' `why`).
    var zoneName: String
    private(set) var recordTypes: [String] = []
    /// Per record type, its new fields and their first values' type tags.
    private(set) var fields: [String: [(name: String, typeTag: String)]] = [:]
    private var fieldNames: [String: Set<String>] = [:]

    init(zoneName: String) {
        self.zoneName = zoneName
    }

    /// Whether PostgreSQL can take the field's name as a column's (an identifier holds no NUL).
    static func canBeAColumn(_ field: String) -> Bool { !field.isEmpty && !field.containsNUL }

    var isEmpty: Bool { recordTypes.isEmpty && fields.isEmpty }

    /// Names PostgreSQL cannot take are left out: their records are rejected, or their values
    /// kept in `fields`, as without evolution.
    mutating func add(recordType: String) {
        guard !recordType.isEmpty, !recordType.containsNUL, !recordTypes.contains(recordType) else { return }
        recordTypes.append(recordType)
    }

    mutating func add(field: String, typeTag: String, of recordType: String) {
        guard Self.canBeAColumn(field), Self.saysAType(typeTag), fieldNames[recordType, default: []].insert(field).inserted else { return }
        fields[recordType, default: []].append((field, typeTag))
    }

    /// Whether a value's tag says what type its column would take. A value without one (no
    /// type, `UNKNOWN`) or a list of no known type (`UNKNOWN_LIST`, which CloudKit was seen to
    /// send, as for an empty list) is kept in `fields` until a value of the field that has one
    /// comes: a column made for it took no typed value of the field afterwards, and every
    /// record with one was rejected. Nor does a tag with a NUL, which no column's type and no
    /// parameter (the change's record in `zonefeed_schema_changes`) can hold.
    static func saysAType(_ tag: String) -> Bool { tag != "UNKNOWN" && tag != "UNKNOWN_LIST" && !tag.containsNUL }

    /// Whether a column made for values tagged `made` takes `value`: its own tag, and the tags
    /// CloudKit gives the same type (an asset is `ASSETID` or `ASSET`; a list of no known type,
    /// as an empty one may be sent, goes into any list's column).
    static func columnMade(for made: String, takes value: FieldValue) -> Bool {
        let tag = value.typeTag
        // A jsonb column an older zonefeed made for a tag of no type takes what any jsonb takes.
        if tag == made || !saysAType(made) { return true }
        switch (made, tag, value) {
        case ("ASSETID", "ASSET", _), ("ASSET", "ASSETID", _): return true
        case (_, "UNKNOWN_LIST", .list(_, let items)): return made.hasSuffix("_LIST") && items.isEmpty
        default: return false
        }
    }

    /// A record of a record type that has no table: the type and its fields.
    mutating func add(_ record: Record) {
        add(recordType: record.recordType)
        for (name, value) in record.fields.sorted(by: { $0.key < $1.key }) { add(field: name, typeTag: value.typeTag, of: record.recordType) }
    }

    /// Adds what `other` met; returns whether any of it was new.
    mutating func merge(_ other: SchemaGrowth) -> Bool {
        let before = (recordTypes.count, fields.values.map(\.count).reduce(0, +))
        for type in other.recordTypes { add(recordType: type) }
        for (type, fields) in other.fields.sorted(by: { $0.key < $1.key }) {
            for field in fields { add(field: field.name, typeTag: field.typeTag, of: type) }
        }
        return before != (recordTypes.count, fields.values.map(\.count).reduce(0, +))
    }

    /// The record types and fields, for an error.
    var summary: String {
        (recordTypes.map { "record type \($0)" } + fields.sorted { $0.key < $1.key }.flatMap { type, fields in fields.map { "field \($0.name) of \(type)" } })
            .joined(separator: ", ")
    }

    /// The changes that give `schema` what this growth needs, named beside what `catalog` holds
    /// (another pipeline's tables, columns made by hand): nothing for what `schema` has already
    /// (another process made it first).
    /// `claimed`: table names other pipelines have claimed (`zonefeed_tables`), whose tables may
    /// have been dropped since: a name taken from one locked its pipeline out.
    func changes(to schema: PostgresSchema, catalog: PostgresSchema.Catalog, claimed: Set<String> = []) -> [SchemaChange] {
        let settings = schema.settings
        let naming = SchemaFileMapping(stripCoreDataPrefix: settings.stripsCoreDataPrefix)
        let reason = "first seen in zone \(zoneName)"
        var changes: [SchemaChange] = []
        var tables: [String: String] = [:]
        for mapping in settings.recordTypes { tables[mapping.recordType] = mapping.table }
        for table in schema.tables { tables[table.mapping.recordType] = table.mapping.table }

        let newTypes = recordTypes.filter { tables[$0] == nil && !settings.skippedRecordTypes.contains($0) }
        if !newTypes.isEmpty {
            // A relation or a type of that name, or of its view's name, takes it.
            let relations = catalog.takenNames.union(catalog.columns.keys)
            let taken = relations.union(tables.values).union(relations.filter { $0.hasSuffix("_live") }.map { String($0.dropLast(5)) })
                .union(claimed)
            let (names, renamed) = SchemaFileMapping.tableNames.names(for: newTypes, taken: taken, plain: naming.plainTable)
            for type in newTypes {
                tables[type] = names[type]!
                let renaming = renamed.first { $0.cloudKitName == type }.map { "; named \($0.name): \($0.reason)" } ?? ""
                changes.append(SchemaChange(kind: .tableCreated, recordType: type, table: names[type]!, why: "record type \(type) \(reason)\(renaming)"))
            }
        }

        for (recordType, met) in fields.sorted(by: { $0.key < $1.key }) {
            guard let table = tables[recordType] else { continue }
            let mapping = schema.table(forRecordType: recordType).map { schema.tables[$0].mapping }
            let mapped = Set(mapping?.fields.map(\.field) ?? [])
            let omitted = mapping?.omittedFields ?? []
            // Up to the most columns evolution gives a table, in the order of their names (the
            // same whatever order a record lists them in); the fields past it stay unmapped.
            let room = max(0, PostgresRecordTypeMapping.maxEvolvedColumns - (mapping?.fields.count ?? 0))
            let new = Array(met.filter { !mapped.contains($0.name) && !omitted.contains($0.name) }.sorted { $0.name < $1.name }.prefix(room))
            guard !new.isEmpty else { continue }
            let taken = Set(mapping?.fields.map(\.column) ?? []).union(catalog.columns[table] ?? [])
            let (names, renamed) = SchemaFileMapping.columnNames.names(for: new.map(\.name), taken: taken) { naming.stripped($0).snakeCased }
            for field in new {
                let type = ColumnType.default(forTypeTag: field.typeTag)
                let renaming = renamed.first { $0.cloudKitName == field.name }.map { "; named \($0.name): \($0.reason)" } ?? ""
                changes.append(
                    SchemaChange(
                        kind: .columnAdded, recordType: recordType, table: table, field: field.name, column: names[field.name]!, columnType: type,
                        cloudKitType: field.typeTag, why: "field \(field.name) of record type \(recordType) \(reason), as \(field.typeTag)\(renaming)"))
            }
        }
        return changes
    }
}
