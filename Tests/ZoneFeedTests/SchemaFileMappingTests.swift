import CloudKitSchema
import Foundation
import TestSupport
import Testing
import ZoneFeed
import ZoneFeedComponents
import ZoneFeedPostgres

/// `recordTypes: { schemaFile: … }`: the tables and columns a CloudKit schema file yields, the
/// overrides, and the errors that point into either file.
@Suite struct SchemaFileMappingTests {
    /// A folder with `pipeline.yml` (the header below, then `recordTypes`) and `schema.ckdb`.
    struct Files {
        let folder: URL
        var pipeline: String { folder.appendingPathComponent("pipeline.yml").path }

        init(recordTypes: String, schema: String) throws {
            folder = FileManager.default.temporaryDirectory.appendingPathComponent("zonefeed-schemafile-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: folder.appendingPathComponent("cloudkit"), withIntermediateDirectories: true)
            let header = "pipeline: notes\nsource:\n  fake: {}\ndestination:\n  url: embedded\n"
            try (header + recordTypes).write(toFile: pipeline, atomically: true, encoding: .utf8)
            try schema.write(to: folder.appendingPathComponent("cloudkit/schema.ckdb"), atomically: true, encoding: .utf8)
        }

        func load() throws -> Pipeline { try Pipeline.load(path: pipeline, components: .zonefeed) }

        /// The diagnostics, as printed, with the folder left out.
        func problems() -> [String] {
            do {
                _ = try load()
                return []
            } catch let error as PipelineFileError {
                return error.diagnostics.map { $0.description.replacingOccurrences(of: folder.path + "/", with: "") }
            } catch {
                return ["unexpected \(error)"]
            }
        }

        func remove() { try? FileManager.default.removeItem(at: folder) }
    }

    static let schema = """
        DEFINE SCHEMA
            RECORD TYPE CD_Note (
                "___createTime" TIMESTAMP,
                "___recordID"   REFERENCE QUERYABLE,
                CD_title        STRING QUERYABLE SEARCHABLE SORTABLE,
                CD_wordCount    INT64 SORTABLE,
                CD_body         STRING,
                CD_thumbnail    BYTES,
                CD_tags         LIST<STRING>,
                CD_place        LOCATION,
                CD_views        NUMBER PREFERRED AS INT64,
                CD_entityName   STRING QUERYABLE,
                GRANT READ TO "_world"
            );
            RECORD TYPE Users ( roles LIST<INT64> );
        """

    @Test func everyFieldGetsATypedColumnWithTheOverridesApplied() throws {
        let files = try Files(
            recordTypes: """
                recordTypes:
                  schemaFile: cloudkit/schema.ckdb
                  stripCoreDataPrefix: true
                  indexes: queryable
                  skip: [Users]
                  override:
                    CD_Note:
                      table: notes
                      fields:
                        CD_body: { column: body_text }
                        CD_views: { type: double precision }
                        CD_thumbnail: omit
                """, schema: Self.schema)
        defer { files.remove() }
        let settings = try files.load().postgresSettings()
        #expect(settings.schemaFile == files.folder.appendingPathComponent("cloudkit/schema.ckdb").path)
        #expect(settings.recordTypes.map(\.recordType) == ["CD_Note"], "Users is skipped")
        let note = try #require(settings.recordTypes.first)
        #expect(note.table == "notes")
        #expect(
            note.fields == [
                PostgresFieldMapping(field: "CD_title", column: "title", type: .text, indexed: true),
                PostgresFieldMapping(field: "CD_wordCount", column: "word_count", type: .bigint, indexed: true),
                PostgresFieldMapping(field: "CD_body", column: "body_text", type: .text),
                PostgresFieldMapping(field: "CD_tags", column: "tags", type: .textArray),
                PostgresFieldMapping(field: "CD_place", column: "place", type: .jsonb),
                PostgresFieldMapping(field: "CD_views", column: "views", type: .doublePrecision),
                PostgresFieldMapping(field: "CD_entityName", column: "entity_name", type: .text, indexed: true),
            ], "no column for the system fields; the thumbnail left to the fields column")
    }

    @Test func withoutOptionsTablesAndColumnsAreTheSnakeCaseOfTheirNames() throws {
        let files = try Files(recordTypes: "recordTypes:\n  schemaFile: cloudkit/schema.ckdb\n", schema: Self.schema)
        defer { files.remove() }
        let settings = try files.load().postgresSettings()
        #expect(settings.recordTypes.map(\.table) == ["cd_note", "users"])
        #expect(
            settings.recordTypes[0].fields.map(\.column) == [
                "cd_title", "cd_word_count", "cd_body", "cd_thumbnail", "cd_tags", "cd_place", "cd_views", "cd_entity_name",
            ])
        #expect(settings.recordTypes[0].fields.allSatisfy { !$0.indexed }, "indexes are off unless asked for")
        #expect(settings.recordTypes[1].fields == [PostgresFieldMapping(field: "roles", column: "roles", type: .bigintArray)])
    }

    /// A schema file of many names that fold onto one another (`f1` and `F1`, …), and of one
    /// very long name, is mapped in bounded time: each collision searched every name given so
    /// far, and each long name's cut measured itself at every character (minutes here before).
    /// The time asserted is the thread's CPU, which a loaded machine does not stretch; the wall
    /// limit only ends a hang.
    @Test(.timeLimit(.minutes(10))) func namesThatCollideByTheThousandAreMappedInBoundedTime() throws {
        let pairs = (0..<20_000).map { "f\($0) INT64, F\($0) INT64" }.joined(separator: ", ")
        let long = String(repeating: "x", count: 200_000)
        let schema = try CloudKitSchema(parsing: "DEFINE SCHEMA\n  RECORD TYPE Note (\(pairs), \(long) STRING);\n")
        var mappings: [PostgresRecordTypeMapping] = []
        let elapsed = threadCPUTime { mappings = SchemaFileMapping().mappings(from: schema) }
        #expect(elapsed < .seconds(10), "mapped in bounded time: \(elapsed) of CPU")
        let mapping = try #require(mappings.first)
        let columns = mapping.fields.map(\.column)
        #expect(columns.count == 40_001)
        #expect(Set(columns.map { $0.lowercased() }).count == 40_001, "no two columns fold onto one")
        #expect(mapping.renamed.count == 20_001, "one of each pair, and the long name")
    }

    /// A skip list of thousands of names the schema lacks, over a schema of thousands of types,
    /// is refused in bounded time: each name searched the schema's list, and was given a
    /// suggestion measured against every type (minutes for 8,000 of each, hours for 100,000).
    /// The first mistakes still get one.
    @Test(.timeLimit(.minutes(10))) func thousandsOfUnknownNamesAreRefusedInBoundedTime() throws {
        let types = (0..<8_000).map { "RECORD TYPE Kind\($0) ( n INT64 );" }.joined(separator: "\n")
        let unknown = (0..<8_000).map { "Kinde\($0)" }
        let files = try Files(
            recordTypes: "recordTypes:\n  schemaFile: cloudkit/schema.ckdb\n  skip: [\(unknown.joined(separator: ", "))]\n",
            schema: "DEFINE SCHEMA\n\(types)\n")
        defer { files.remove() }
        var problems: [String] = []
        let elapsed = threadCPUTime { problems = files.problems() }
        print("8,000 unknown names refused in \(elapsed) of CPU")
        #expect(elapsed < .seconds(10), "refused in bounded time: \(elapsed) of CPU")
        #expect(problems.count == 8_000)
        #expect(problems.first?.hasSuffix("(did you mean Kind0?)") == true, "\(problems.first ?? "")")
        #expect(problems.last?.hasSuffix("does not define") == true, "\(problems.last ?? "")")
    }

    /// A pipeline maps at most `maxMappedTables` tables: a run makes the missing ones in one
    /// transaction, and more ran out of PostgreSQL's lock table at every run, after `validate`
    /// passed. Refused where the file names them, a schema file's or a written-out mapping.
    @Test func moreTablesThanARunCanMakeAreRefusedWhereTheFileNamesThem() throws {
        let many = PostgresSchema.maxMappedTables + 1
        let schemaFile = try Files(
            recordTypes: "recordTypes:\n  schemaFile: cloudkit/schema.ckdb\n",
            schema: "DEFINE SCHEMA\n" + (0..<many).map { "RECORD TYPE Kind\($0) ( n INT64 );" }.joined(separator: "\n") + "\n")
        defer { schemaFile.remove() }
        #expect(schemaFile.problems().count == 1)
        let refusal = "pipeline.yml:7:15: cloudkit/schema.ckdb defines record types for 1001 tables, and a pipeline may map at most 1000"
        #expect(schemaFile.problems().first?.hasPrefix(refusal) == true, "\(schemaFile.problems())")
        let skipOne = try Files(
            recordTypes: "recordTypes:\n  schemaFile: cloudkit/schema.ckdb\n  skip: [Kind0]\n",
            schema: "DEFINE SCHEMA\n" + (0..<many).map { "RECORD TYPE Kind\($0) ( n INT64 );" }.joined(separator: "\n") + "\n")
        defer { skipOne.remove() }
        #expect(skipOne.problems() == [], "1000 are taken")
        let written = try Files(recordTypes: "recordTypes:\n" + (0..<many).map { "  Kind\($0): kind_\($0)\n" }.joined(), schema: Self.schema)
        defer { written.remove() }
        #expect(written.problems().count == 1)
        #expect(written.problems().first?.hasPrefix("pipeline.yml:6:1: recordTypes maps 1001 tables") == true, "\(written.problems())")
    }

    @Test func aSchemaFileThatDoesNotParseIsReportedAtItsOwnLineAndColumn() throws {
        let files = try Files(
            recordTypes: "recordTypes:\n  schemaFile: cloudkit/schema.ckdb\n",
            schema: "DEFINE SCHEMA\n    RECORD TYPE Note (\n        title STIRNG\n    );\n")
        defer { files.remove() }
        #expect(
            files.problems() == [
                "cloudkit/schema.ckdb:3:15: field title has unknown type 'STIRNG' (expected one of ASSET, BYTES, DOUBLE, INT64, LOCATION, NUMBER, REFERENCE, STRING, TIMESTAMP, or LIST<…>)"
            ])
    }

    @Test func overridesOfWhatTheSchemaLacksAreRefusedWithASuggestion() throws {
        let files = try Files(
            recordTypes: """
                recordTypes:
                  schemaFile: cloudkit/schema.ckdb
                  skip: [User]
                  override:
                    CD_Notes:
                      table: notes
                    CD_Note:
                      fields:
                        CD_titel: omit
                        CD_body: { column: record_name }
                """, schema: Self.schema)
        defer { files.remove() }
        #expect(
            files.problems() == [
                "pipeline.yml:8:9: recordTypes.skip names record type User, which cloudkit/schema.ckdb does not define (did you mean Users?)",
                "pipeline.yml:10:5: recordTypes.override.CD_Notes: cloudkit/schema.ckdb defines no record type CD_Notes (did you mean CD_Note?)",
                "pipeline.yml:14:9: recordTypes.override.CD_Note.fields: record type CD_Note in cloudkit/schema.ckdb has no field CD_titel (did you mean CD_title?)",
                "pipeline.yml:15:28: column 'record_name' of field CD_body clashes with the system column record_name",
            ])
    }

    @Test func aMissingSchemaFileIsNamedWhereThePipelineNamesIt() throws {
        let files = try Files(recordTypes: "recordTypes:\n  schemaFile: cloudkit/missing.ckdb\n", schema: Self.schema)
        defer { files.remove() }
        #expect(files.problems().first?.hasPrefix("pipeline.yml:7:15: recordTypes.schemaFile: cannot read ") == true, "\(files.problems())")
        #expect(files.problems().first?.hasSuffix("missing.ckdb: there is no such file") == true)
    }

    /// What a run could not survive is avoided when the mapping is derived: a column named like
    /// the staging tables' `seq`, an index on bytes (a b-tree refuses large entries), a table
    /// named like another's primary key index.
    @Test func derivedNamesAndIndexesAvoidWhatPostgreSQLWouldRefuse() throws {
        let files = try Files(
            recordTypes: "recordTypes:\n  schemaFile: cloudkit/schema.ckdb\n  indexes: queryable\n",
            schema: "DEFINE SCHEMA\n  RECORD TYPE Note ( seq INT64, data BYTES QUERYABLE, title STRING QUERYABLE );\n  RECORD TYPE NotePkey ( a STRING );")
        defer { files.remove() }
        let mappings = try files.load().postgresSettings().recordTypes
        let note = try #require(mappings.first)
        #expect(note.fields.map(\.column).first != "seq" && note.fields.map(\.column).first?.hasPrefix("seq_") == true)
        #expect(note.fields.map(\.indexed) == [false, false, true], "no index on bytea")
        #expect(mappings[1].table.hasPrefix("note_pkey_") && mappings[1].renamedTable?.reason == "note_pkey is reserved")
    }

    @Test func anOverrideOfAFieldIsOmitOrAMapping() throws {
        let files = try Files(
            recordTypes: "recordTypes:\n  schemaFile: cloudkit/schema.ckdb\n  override:\n    CD_Note:\n      fields:\n        CD_body: omitt\n",
            schema: Self.schema)
        defer { files.remove() }
        #expect(
            files.problems() == ["pipeline.yml:11:18: recordTypes.override.CD_Note.fields.CD_body must be 'omit' or { column: ..., type: ... }, not 'omitt'"])
    }

    @Test func anOverrideOfASkippedRecordTypeIsRefused() throws {
        let files = try Files(
            recordTypes: "recordTypes:\n  schemaFile: cloudkit/schema.ckdb\n  skip: [Users]\n  override:\n    Users:\n      table: people\n",
            schema: Self.schema)
        defer { files.remove() }
        #expect(
            files.problems() == [
                "pipeline.yml:10:5: recordTypes.override.Users: record type Users is also in recordTypes.skip, so it gets no table to override"
            ])
    }
}
