import Testing
import ZoneFeedPostgres

/// CloudKit names are camelCase and unbounded; PostgreSQL folds and cuts at 63 bytes. The names
/// zonefeed derives never collide, fit, avoid the system columns, and are the same every time.
@Suite struct IdentifierNamesTests {
    let columns = IdentifierNames(maxBytes: 63, reserved: Set(systemColumns))

    @Test func twoFieldsThatFoldToOneNameGetDistinctNamesAndTheSnakeCaseOneKeepsIt() {
        let (names, renamed) = columns.names(for: ["fooBar", "foo_bar", "FooBar"])
        #expect(names["foo_bar"] == "foo_bar", "the field already in snake_case keeps its name")
        #expect(Set(names.values).count == 3)
        for field in ["fooBar", "FooBar"] {
            let name = names[field]!
            #expect(name.hasPrefix("foo_bar_") && name.utf8.count == "foo_bar_".utf8.count + 8, "\(name)")
        }
        #expect(renamed.map(\.description).allSatisfy { $0.contains("(foo_bar is taken by foo_bar)") }, "\(renamed)")
        #expect(columns.names(for: ["FooBar", "foo_bar", "fooBar"]).names == names, "the same names whatever the order")
        #expect(columns.names(for: ["fooBar", "foo_bar", "FooBar"]).names == names, "and every time")
    }

    @Test func longNamesSharingTheirFirst63BytesFitAndDiffer() {
        let stem = String(repeating: "veryLongFieldName", count: 4)  // 68 bytes, 80 in snake_case
        let (names, renamed) = columns.names(for: [stem + "One", stem + "Two", "short"])
        let one = names[stem + "One"]!
        let two = names[stem + "Two"]!
        #expect(one != two)
        #expect(one.utf8.count == 63 && two.utf8.count == 63)
        #expect(one.hasPrefix("very_long_field_namevery_long") && two.hasPrefix("very_long_field_namevery_long"), "the snake_case name, cut")
        #expect(names["short"] == "short")
        #expect(renamed.count == 2 && renamed.allSatisfy { $0.reason == "longer than 63 bytes" })
    }

    @Test func namesOfSystemColumnsAreRenamedTheSameWay() {
        let (names, renamed) = columns.names(for: ["recordName", "fields", "deletedAt", "title"])
        #expect(names["title"] == "title")
        for field in ["recordName", "fields", "deletedAt"] {
            #expect(!systemColumns.contains(names[field]!), "\(field) → \(names[field]!)")
        }
        #expect(renamed.first { $0.cloudKitName == "recordName" }?.reason == "record_name is reserved")
    }

    @Test func aNameTakenByTheUserIsLeftToTheUser() {
        let (names, _) = columns.names(for: ["bodyText"], taken: ["body_text"])
        #expect(names["bodyText"]!.hasPrefix("body_text_"))
    }

    @Test func tablesAvoidTheViewsEndingAndZonefeedsPrefix() throws {
        let files = try SchemaFileMappingTests.Files(
            recordTypes: "recordTypes:\n  schemaFile: cloudkit/schema.ckdb\n",
            schema: "DEFINE SCHEMA\n  RECORD TYPE ItemLive ( a STRING );\n  RECORD TYPE ZonefeedRuns ( b STRING );\n  RECORD TYPE item_live ( c STRING );")
        defer { files.remove() }
        let tables = try files.load().postgresSettings().recordTypes.map(\.table)
        #expect(tables.count == 3 && Set(tables).count == 3)
        #expect(tables.allSatisfy { !$0.hasSuffix("_live") && !$0.hasPrefix("zonefeed_") }, "\(tables)")
        #expect(tables[1] == "ck_zonefeed_runs")
    }
}
