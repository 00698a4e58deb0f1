import CloudKitSchema
import Foundation
import Testing

/// The `.ckdb` reader on what `cktool export-schema` writes (two real exports, as quoted in
/// field-notes §2), on a file of every construct, and on files it must refuse with their line
/// and column.
@Suite struct SchemaReaderTests {
    static func schema(_ name: String) throws -> CloudKitSchema {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Schemas/\(name)")
        return try CloudKitSchema(parsing: try String(contentsOf: url, encoding: .utf8))
    }

    @Test func aRealExportReadsWithItsSystemFieldsApartAndItsOptions() throws {
        let schema = try Self.schema("moolah.ckdb")
        #expect(schema.recordTypes.map(\.name) == ["AccountRecord", "Users"])
        let account = try #require(schema[recordType: "AccountRecord"])
        #expect(account.fields.map(\.name) == ["instrumentId", "isHidden", "name", "position", "type", "valuationMode"])
        #expect(account.systemFields.map(\.name) == ["___createTime", "___createdBy", "___etag", "___modTime", "___modifiedBy", "___recordID"])
        #expect(account[field: "instrumentId"]?.options == [.queryable, .searchable, .sortable])
        #expect(account[field: "isHidden"]?.type == FieldType(.int64))
        #expect(account[field: "valuationMode"]?.options == [.queryable, .sortable])
        #expect(
            account.grants == [
                Grant(privileges: [.write], role: "_creator"), Grant(privileges: [.create], role: "_icloud"), Grant(privileges: [.read], role: "_world"),
            ])
        #expect(account.position == SchemaPosition(line: 3, column: 17))
        #expect(schema[recordType: "Users"]?[field: "roles"]?.type == FieldType(.int64, isList: true))
    }

    @Test func aCoreDataExportWithACustomRoleAndAGrantOfTwoPrivileges() throws {
        let schema = try Self.schema("dispatch.ckdb")
        #expect(schema.roles == ["moderator"])
        #expect(schema[recordType: "CD_Report"]?.fields.map(\.name) == ["CD_date", "CD_entityName", "CD_location"])
        #expect(schema[recordType: "CD_Report"]?[field: "CD_location"]?.type == FieldType(.bytes))
        let question = try #require(schema[recordType: "CatalogQuestion"])
        #expect(question.fields.map(\.name) == ["tags", "typeRaw"])
        #expect(question.grants.last == Grant(privileges: [.create, .write], role: "moderator"))
    }

    @Test func everyConstructOfTheLanguage() throws {
        let schema = try Self.schema("every-construct.ckdb")
        #expect(schema.roles == ["editor", "Power Users"])
        #expect(schema.recordTypes.map(\.name) == ["Note", "Empty"])
        let note = try #require(schema[recordType: "Note"])
        let types = Dictionary(uniqueKeysWithValues: note.fields.map { ($0.name, $0.type.description) })
        #expect(
            types == [
                "title": "STRING", "body": "STRING", "wordCount": "INT64", "rating": "DOUBLE", "editedAt": "TIMESTAMP", "thumbnail": "BYTES",
                "attachment": "ASSET", "place": "LOCATION", "folder": "REFERENCE", "size": "NUMBER", "views": "NUMBER PREFERRED AS INT64",
                "score": "NUMBER PREFERRED AS DOUBLE", "secret": "ENCRYPTED STRING", "secretBytes": "ENCRYPTED BYTES",
                "secretCount": "ENCRYPTED INT64", "secretRatio": "ENCRYPTED DOUBLE", "secretPlace": "ENCRYPTED LOCATION",
                "secretDate": "ENCRYPTED TIMESTAMP", "tags": "LIST<STRING>", "counts": "LIST<INT64>", "scores": "LIST<DOUBLE>",
                "reminders": "LIST<TIMESTAMP>", "chunks": "LIST<BYTES>", "related": "LIST<REFERENCE>", "files": "LIST<ASSET>",
                "route": "LIST<LOCATION>", "amounts": "LIST<NUMBER PREFERRED AS INT64>", "hidden": "LIST<ENCRYPTED STRING>",
                "grant": "STRING", "queryable": "INT64", "odd \"name\"": "STRING",
            ])
        #expect(note[field: "wordCount"]?.options == [.sortable, .queryable])
        #expect(note[field: "body"]?.options == [.searchable])
        #expect(note[field: "title"]?.position == SchemaPosition(line: 12, column: 9))
        #expect(note.systemFields.map(\.name) == ["___createTime", "___recordID"])
        #expect(
            note.grants == [
                Grant(privileges: [.read, .write], role: "editor"), Grant(privileges: [.read], role: "Power Users"),
                Grant(privileges: [.create], role: "_icloud"),
            ])
        #expect(schema[recordType: "Empty"]?.fields == [])
    }

    /// The type tags CloudKit Web Services sends with the values of such fields.
    @Test func typeTagsFollowTheWireFormat() {
        #expect(FieldType(.asset).typeTag == "ASSETID")
        #expect(FieldType(.string, isList: true).typeTag == "STRING_LIST")
        #expect(FieldType(.bytes, encrypted: true).typeTag == "ENCRYPTED_BYTES")
        #expect(FieldType(.string, encrypted: true).typeTag == "STRING")
        #expect(FieldType(.number).typeTag == "DOUBLE")
        #expect(FieldType(.number, preferred: .int64, isList: true).typeTag == "INT64_LIST")
    }

    @Test(
        arguments: [
            ("RECORD TYPE Note ();", "1:1: the file must begin with DEFINE SCHEMA, found 'RECORD'"),
            ("DEFINE SCHEMA\n  RECORD TYPE Note (\n    title STIRNG\n  );", "3:11: field title has unknown type 'STIRNG'"),
            ("DEFINE SCHEMA\n  RECORD TYPE Note (\n    title STRING\n    body STRING\n  );", "4:5: expected ',' after field title, before field body"),
            (
                "DEFINE SCHEMA\n  RECORD TYPE Note (title STRING)\n  RECORD TYPE Tag ();",
                "3:3: expected ';' after record type Note (begun at line 2), found 'RECORD'"
            ),
            ("DEFINE SCHEMA\n  RECORD TYPE Note (\n    queryable STRING\n  );", "3:5: 'queryable' is a reserved word: write it in double quotes"),
            (
                "DEFINE SCHEMA\n  RECORD TYPE Note (\n    title STRING,\n    title INT64\n  );",
                "4:5: field title is defined twice in record type Note (first at line 3)"
            ),
            (
                "DEFINE SCHEMA\n  RECORD TYPE Note (title STRING);\n  RECORD TYPE Note (body STRING);",
                "3:15: record type Note is defined twice (first at line 2)"
            ),
            ("DEFINE SCHEMA\n  RECORD TYPE Note (\n    tags LIST<STRING\n  );", "4:3: expected '>' to close LIST<STRING> of field tags, found ')'"),
            ("DEFINE SCHEMA\n  RECORD TYPE Note (\n    file ENCRYPTED ASSET\n  );", "3:20: ENCRYPTED ASSET is not a type"),
            ("DEFINE SCHEMA\n  RECORD TYPE Note (\n    n NUMBER PREFERRED AS STRING\n  );", "3:27: a NUMBER is preferred as INT64 or DOUBLE, not 'STRING'"),
            ("DEFINE SCHEMA\n  RECORD TYPE Note (\n    title STRING QUERYABLE QUERYABLE\n  );", "3:28: option QUERYABLE is given twice for field title"),
            ("DEFINE SCHEMA\n  RECORD TYPE Note (\n    title STRING INDEXED\n  );", "3:18: unknown option 'INDEXED' for field title"),
            ("DEFINE SCHEMA\n  RECORD TYPE Note (\n    title STRING\n    GRANT READ TO \"_world\"\n  );", "4:5: expected ',' after field title, before GRANT"),
            ("DEFINE SCHEMA\n  /* not closed\n  RECORD TYPE Note ();", "2:3: this /* comment is never closed with */"),
            ("DEFINE SCHEMA\n  RECORD TYPE \"Note (title STRING);", "2:15: this quoted name is not closed on its line"),
            ("DEFINE SCHEMA\n  RECORD TYPE Note (\n    2fast INT64\n  );", "3:5: a name must start with a letter"),
            (
                "DEFINE SCHEMA\n  RECORD TYPE Note (\n    title STRING,\n    GRANT READ \"_world\"\n  );",
                "4:16: a grant names its role after TO, found '\"_world\"'"
            ),
            ("DEFINE SCHEMA\n  RECORD TYPE Note (\n    title\n  );", "4:3: field title has no type"),
            ("DEFINE SCHEMA\n  RECORD TYPE Note (\n    title STRING,\n  );", "4:3: expected a field (or GRANT) name in record type Note, found ')'"),
            ("DEFINE SCHEMA\n  RECORD TYPE Note (title STRING);\n  CREATE TABLE notes;", "3:10: CREATE must be followed by ROLE, found 'TABLE'"),
            ("DEFINE SCHEMA\n  RECORD TYPE Note (title STRING) ;\n  @", "3:3: unexpected character '@'"),
            ("DEFINE SCHEMA\n  RECORD TYPE Note (\n    grid LIST<LIST<INT64>>\n  );", "3:15: field grid has a LIST inside a LIST"),
            ("DEFINE SCHEMA\n  RECORD TYPE \"No\u{1}te\" ();", "2:18: a quoted name holds a control character (U+1)"),
            ("DEFINE SCHEMA\n  RECORD TYPE Note (\"wo\trd\" STRING);", "2:24: a quoted name holds a control character (U+9)"),
        ])
    func aMalformedFileIsRefusedAtItsLineAndColumn(text: String, expected: String) {
        do {
            let schema = try CloudKitSchema(parsing: text)
            Issue.record("read instead of refused: \(schema)")
        } catch {
            #expect(error.description.hasPrefix(expected), "\(error.description)")
        }
    }
}
