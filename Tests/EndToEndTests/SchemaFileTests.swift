import FakeCloudKit
import Foundation
import LibPQ
import TestSupport
import Testing

/// Tables from a CloudKit schema file, as a user meets them: `zonefeed validate` on a real
/// export, `zonefeed schema mapping`, and a backfill over HTTP from the fake server into the
/// columns the schema file yields.
@Suite struct SchemaFileTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let fakeSchema = repository.appendingPathComponent("pipelines/cloudkit/fake.ckdb").path
    static let realExport = repository.appendingPathComponent("Tests/CloudKitSchemaTests/Schemas/dispatch.ckdb").path

    /// The fake feed's schema file, with the tables the test support reads.
    static let recordTypes = """
        recordTypes:
          schemaFile: \(fakeSchema)
          indexes: queryable
          skip: [Users]
          override:
            Note:
              table: notes
              fields:
                related: { column: related_notes }
            Folder: { table: folders }
            Tag: { table: tags }

        """

    @Test func aPipelineOnASchemaFileIsBackfilledIntoTypedColumnsEqualToTheSource() async throws {
        let s = try await CloudKitEndToEndTests.Setup("schemafile", fake: FakeSettings(seed: 113, zones: 2, recordsPerZone: 800)) {
            $0.recordTypesSection = Self.recordTypes
        }
        defer { s.stop() }
        let run = try await s.run()
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try await s.liveDifferences() == [])
        #expect(try await NoteColumns.differences(s.p, expected: s.p.expected(), everyField: true) == [], "every Note field in its typed column")
        try Connection.withConnection(s.p.url) { c in
            let schema = s.p.schema
            // Folders and tags: their fields in typed columns too, nothing left in `fields`.
            let folders = try c.query(
                "SELECT count(*), count(name), count(color), count(*) FILTER (WHERE fields <> '{}'::jsonb) FROM \(quoteIdentifier(schema)).folders_live"
            ).rows[0]
            #expect(folders[0] != "0" && folders[0] == folders[1] && folders[0] == folders[2] && folders[3] == "0", "\(folders)")
            let tags = try c.query("SELECT count(*), count(label), count(uses) FROM \(quoteIdentifier(schema)).tags_live").rows[0]
            #expect(tags[0] != "0" && tags[0] == tags[1] && tags[0] == tags[2], "\(tags)")
            let types = try c.query(
                "SELECT column_name || ' ' || data_type FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'notes' AND column_name IN ('word_count', 'edited_at', 'tags', 'place') ORDER BY 1",
                [schema]
            ).rows.map { $0[0]! }
            #expect(types == ["edited_at timestamp with time zone", "place jsonb", "tags ARRAY", "word_count bigint"])
            // Each QUERYABLE or SORTABLE field indexed: a hash on text, a b-tree on the others.
            let indexes = try c.query(
                """
                SELECT tablename || ' ' || substring(indexdef FROM 'USING (.*)$') FROM pg_indexes
                WHERE schemaname = $1 AND tablename NOT LIKE 'zonefeed%' AND indexname NOT LIKE '%pkey' ORDER BY 1
                """, [schema]
            ).rows.map { $0[0]! }
            #expect(
                indexes == [
                    "folders hash (name)", "folders hash (parent)", "notes btree (edited_at)", "notes btree (word_count)", "notes hash (folder)",
                    "notes hash (title)", "tags hash (label)",
                ], "\(indexes)")
        }
    }

    /// `zonefeed schema mapping` writes the section out; pasted into a pipeline, it yields the
    /// very tables, columns and types the schema file does.
    @Test func theWrittenOutMappingIsTheSameAsTheSchemaFiles() async throws {
        let zonefeed = try ZonefeedBinary(environment: [:])
        defer { zonefeed.remove() }
        let written = try await zonefeed.run(["schema", "mapping", Self.realExport, "--strip-core-data-prefix", "--index-queryable"])
        #expect(written.status == 0, "\(written.stderr)")
        #expect(
            written.stdout.contains("  CD_Report:\n    table: report\n    fields:\n      CD_date: { column: date, type: timestamptz, index: true }"),
            "\(written.stdout)")
        let header = "pipeline: dispatch\nsource:\n  fake: {}\ndestination:\n  url: embedded\n  schema: dispatch\n"
        let explicit = zonefeed.directory.appendingPathComponent("explicit.yml").path
        let derived = zonefeed.directory.appendingPathComponent("derived.yml").path
        try (header + written.stdout).write(toFile: explicit, atomically: true, encoding: .utf8)
        try (header + "recordTypes:\n  schemaFile: \(Self.realExport)\n  stripCoreDataPrefix: true\n  indexes: queryable\n")
            .write(toFile: derived, atomically: true, encoding: .utf8)
        func ddl(_ file: String) async throws -> String {
            let output = try await zonefeed.run(["validate", file])
            #expect(output.status == 0, "\(output.stdout)\(output.stderr)")
            return String(output.stdout[output.stdout.range(of: "-- DDL")!.lowerBound...])
        }
        let fromExplicit = try await ddl(explicit)
        await #expect(fromExplicit == (try ddl(derived)))
        #expect(fromExplicit.contains("\"location\" bytea") && fromExplicit.contains("\"tags\" text[]"))
    }

    /// A list field whose column is renamed (here, two fields land on one snake_case name) is
    /// written as `{ column: …, type: "text[]" }`: printed plain inside the braces, `[` began a
    /// sequence, and the pasted section was refused as invalid YAML.
    @Test func aRenamedListFieldIsWrittenOutAsAMappingThatReadsBack() async throws {
        let zonefeed = try ZonefeedBinary(environment: [:])
        defer { zonefeed.remove() }
        let schema = zonefeed.directory.appendingPathComponent("lists.ckdb").path
        try "DEFINE SCHEMA\n  RECORD TYPE Note (\n    tagList LIST<STRING>,\n    tag_list LIST<STRING>\n  );\n"
            .write(toFile: schema, atomically: true, encoding: .utf8)
        let written = try await zonefeed.run(["schema", "mapping", schema])
        #expect(written.status == 0, "\(written.stderr)")
        #expect(written.stdout.contains("type: \"text[]\" }"), "\(written.stdout)")
        let file = zonefeed.directory.appendingPathComponent("lists.yml").path
        try ("pipeline: lists\nsource:\n  fake: {}\ndestination:\n  url: embedded\n  schema: lists\n" + written.stdout)
            .write(toFile: file, atomically: true, encoding: .utf8)
        let validated = try await zonefeed.run(["validate", file])
        #expect(validated.status == 0, "\(validated.stdout)\(validated.stderr)")
        #expect(validated.stdout.contains("text[]"), "\(validated.stdout)")
    }

    /// A record type of more fields than a PostgreSQL table has columns (1600, zonefeed's own
    /// among them) is refused where it is written, in a schema file or in the pipeline file.
    /// Before, validate passed it and every run failed at CREATE TABLE with no place named.
    @Test func aRecordTypeOfMoreFieldsThanATableHoldsIsRefusedWhereItIsWritten() async throws {
        let zonefeed = try ZonefeedBinary(environment: [:])
        defer { zonefeed.remove() }
        let header = "pipeline: wide\nsource:\n  fake: {}\ndestination:\n  url: embedded\n  schema: wide\n"
        let schema = zonefeed.directory.appendingPathComponent("wide.ckdb").path
        let fields = (0..<1_700).map { "    f\($0) INT64" }.joined(separator: ",\n")
        try "DEFINE SCHEMA\n  RECORD TYPE Wide (\n\(fields)\n  );\n".write(toFile: schema, atomically: true, encoding: .utf8)
        let fromSchema = zonefeed.directory.appendingPathComponent("schema.yml").path
        try (header + "recordTypes:\n  schemaFile: wide.ckdb\n").write(toFile: fromSchema, atomically: true, encoding: .utf8)
        let refused = try await zonefeed.run(["validate", fromSchema])
        #expect(refused.status == 2)
        #expect(refused.stderr.contains("\(schema):2:15: record type Wide has 1700 fields, and its table can have at most 1586"), "\(refused.stderr)")

        let written = zonefeed.directory.appendingPathComponent("written.yml").path
        let mapped = (0..<1_700).map { "      f\($0): bigint" }.joined(separator: "\n")
        try (header + "recordTypes:\n  Wide:\n    table: wide\n    fields:\n\(mapped)\n").write(toFile: written, atomically: true, encoding: .utf8)
        let alsoRefused = try await zonefeed.run(["validate", written])
        #expect(alsoRefused.status == 2)
        #expect(alsoRefused.stderr.contains("written.yml:8:3: record type Wide maps 1700 fields"), "\(alsoRefused.stderr)")
    }

    @Test func aSchemaFileThatCannotBeReadOrParsedExitsTwoSayingWhy() async throws {
        let zonefeed = try ZonefeedBinary(environment: [:])
        defer { zonefeed.remove() }
        let file = zonefeed.directory.appendingPathComponent("bad.ckdb").path
        try "DEFINE SCHEMA\n  RECORD TYPE Note (\n    title STRING\n    body STRING\n  );\n".write(toFile: file, atomically: true, encoding: .utf8)
        let output = try await zonefeed.run(["schema", "mapping", file])
        #expect(output.status == 2)
        #expect(output.stderr == "\(file):4:5: expected ',' after field title, before field body\n")
        let folder = try await zonefeed.run(["schema", "mapping", zonefeed.directory.path])
        #expect(folder.status == 2 && folder.stderr == "\(zonefeed.directory.path): cannot read the schema file: it is a folder\n", "\(folder.stderr)")
        let skip = try await zonefeed.run(["schema", "mapping", Self.realExport, "--skip", "CD_Reprot"])
        #expect(skip.status == 2 && skip.stderr.hasSuffix("defines no record type CD_Reprot (did you mean CD_Report?)\n"), "\(skip.stderr)")
    }
}
