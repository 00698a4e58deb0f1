import CloudKitModel
import FakeCloudKit
import Foundation
import LibPQ
import TestSupport
import Testing

/// Tables that grow with the records (`schemaEvolution: evolve`), as a user meets them: a
/// pipeline with no mapping at all, a field and a record type that appear mid-stream, two
/// processes that meet the same new field at once, and a value whose type is not its column's.
/// Each runs the built binary against `zonefeed fake-server` into a real PostgreSQL.
@Suite struct SchemaEvolutionTests {
    typealias Setup = CloudKitEndToEndTests.Setup

    /// The shape changes a pipeline recorded, oldest first: change, record type, table, field,
    /// column, column type, run, why.
    static func changes(_ p: FakePipeline) throws -> [[String?]] {
        try Connection.withConnection(p.url) { c in
            try c.query(
                """
                SELECT change, record_type, table_name, field, column_name, column_type, run_id::text, why
                FROM \(quoteIdentifier(p.schema)).zonefeed_schema_changes WHERE pipeline = $1 ORDER BY id
                """, [p.name]
            ).rows.map { Array($0) }
        }
    }

    static func columns(_ p: FakePipeline, of table: String) throws -> [String: String] {
        try Connection.withConnection(p.url) { c in
            var columns: [String: String] = [:]
            for row in try c.query(
                """
                SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute AS a
                WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
                """, ["\(quoteIdentifier(p.schema)).\(quoteIdentifier(table))"]
            ).rows {
                columns[row[0]!] = row[1]!
            }
            return columns
        }
    }

    @Test func anAutoPipelineIsBackfilledIntoTheTablesAndColumnsItMakesEqualToTheSource() async throws {
        let s = try await Setup("autotypes", fake: FakeSettings(seed: 131, zones: 2, recordsPerZone: 800)) {
            $0.recordTypesSection = "recordTypes: auto\n"
            $0.tables = ["Note": "note", "Folder": "folder", "Tag": "tag"]
        }
        defer { s.stop() }
        let run = try await s.run()
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stderr.contains("made a table for a new record type"), "\(run.stderr)")
        #expect(try await s.liveDifferences() == [])
        #expect(
            try await NoteColumns.differences(s.p, expected: s.p.expected(), related: "related", everyField: true) == [], "every Note field in its typed column"
        )

        let note = try Self.columns(s.p, of: "note")
        #expect(note["word_count"] == "bigint" && note["edited_at"] == "timestamp with time zone" && note["rating"] == "double precision")
        #expect(note["tags"] == "text[]" && note["chunks"] == "bytea[]" && note["place"] == "jsonb" && note["folder"] == "text")
        #expect(try Self.columns(s.p, of: "folder")["color"] == "bigint")
        #expect(try Self.columns(s.p, of: "tag") == (try Self.columns(s.p, of: "tag_live")), "the view shows every column")
        let changes = try Self.changes(s.p)
        #expect(changes.filter { $0[0] == "table_created" }.map { $0[2]! }.sorted() == ["folder", "note", "tag"])
        #expect(changes.filter { $0[0] == "column_added" && $0[2] == "note" }.count == 17)
        #expect(changes.allSatisfy { $0[6] == "1" }, "all made by run 1")

        // A second run finds nothing new: nothing changes shape, nothing is rejected.
        let again = try await s.run()
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try Self.changes(s.p).count == changes.count)
        #expect(try await DestinationSnapshot.read(s.p).runRejects == 0)
    }

    /// A name PostgreSQL holds as a type (an extension's, such as PostGIS's `geometry`, or one
    /// made by hand) or as a table without columns cannot be a new table's: a table is a type
    /// too. Evolution names the table otherwise, as it does beside a table of that name, where
    /// `CREATE TABLE` failed with 42710 and the zone failed on every run.
    @Test func aNameTakenByATypeOrAnEmptyTableIsNotGivenToANewTable() async throws {
        let s = try await Setup("autotaken", fake: FakeSettings(seed: 132, zones: 1, recordsPerZone: 300)) {
            $0.recordTypesSection = "recordTypes: auto\n"
        }
        defer { s.stop() }
        try Connection.withConnection(s.p.url) { c in
            let schema = quoteIdentifier(s.p.schema)
            try c.execute("CREATE SCHEMA IF NOT EXISTS \(schema)")
            try c.execute("CREATE TYPE \(schema).note AS (x integer)")
            try c.execute("CREATE TYPE \(schema).folder_live AS ENUM ('a')")
            try c.execute("CREATE TABLE \(schema).tag ()")
        }
        let run = try await s.run()
        #expect(run.status == 0, "\(run.stderr)")
        let made = try Self.changes(s.p).filter { $0[0] == "table_created" }
        #expect(made.count == 3, "\(made)")
        for change in made {
            #expect(!["note", "folder", "tag"].contains(change[2]), "\(change)")
            let rows = try Connection.withConnection(s.p.url) { c in
                try c.query("SELECT count(*)::bigint FROM \(quoteIdentifier(s.p.schema)).\(quoteIdentifier(change[2]!))").rows[0].decode(0, as: Int64.self)
            }
            let expected = s.p.expected().rows.values.filter { !$0.deleted && $0.record.recordType == change[1] }.count
            #expect(rows == Int64(expected) && expected > 0, "\(change)")
        }
    }

    @Test func aFieldAndARecordTypeAddedMidStreamBecomeAColumnAndATableAndNothingIsDropped() async throws {
        let s = try await Setup("midstream", fake: FakeSettings(seed: 137, zones: 2, recordsPerZone: 400)) {
            $0.recordTypesSection = SchemaFileTests.recordTypes
        }
        defer { s.stop() }
        let first = try await s.run()
        #expect(first.status == 0, "\(first.stderr)")
        let before = try Self.columns(s.p, of: "notes")
        #expect(try Self.changes(s.p).isEmpty, "the schema file's tables need no change")

        // Mid-stream: a field Note never had, two that land on one column name, one longer than
        // PostgreSQL's 63 bytes, one that is a system column's name; a new record type; a value
        // of the wrong type for its column.
        let long = "aFieldNameThatGoesOnAndOnWellPastWhatPostgreSQLKeepsOfAnIdentifierX"
        // And one whose quote a prepended mark hides inside a larger Character: quoted by
        // Characters, its column's name ended there and the rest ran as SQL.
        let hostile = "\u{600}\"\tint);\tdrop\ttable\tzonefeed_checkpoints;--"
        try await s.server.admin(
            "records/add",
            [
                "zone": "Zone01",
                "records": try FakeServerProcess.wire([
                    Record(
                        recordName: "MOOD-1", recordType: "Note", recordChangeTag: "m-1",
                        fields: [
                            "title": .string("calm"), "mood": .string("calm"), "fooBar": .int64(1), "foo_bar": .int64(2), long: .double(2.5),
                            "recordName": .string("shadow"), hostile: .string("quoted"),
                        ]),
                    Record(recordName: "MOOD-2", recordType: "Note", recordChangeTag: "m-2", fields: ["mood": .string("tense"), "wordCount": .int64(12)]),
                    Record(recordName: "CONFLICT-1", recordType: "Note", recordChangeTag: "c-1", fields: ["wordCount": .string("many")]),
                    Record(recordName: "CONFLICT-2", recordType: "Note", recordChangeTag: "c-2", fields: ["mood": .int64(3)]),
                    Record(
                        recordName: "COMMENT-1", recordType: "Comment", recordChangeTag: "k-1",
                        fields: ["text": .string("first!"), "likes": .int64(3), "note": .reference(Reference(recordName: "MOOD-1"))]),
                    Record(recordName: "COMMENT-2", recordType: "Comment", recordChangeTag: "k-2", fields: ["likes": .double(3.5)]),
                ]),
            ])
        let second = try await s.run()
        #expect(second.status == 0, "\(second.stderr)")
        #expect(second.stderr.contains("added a column for a new field") && second.stderr.contains("column=mood"), "\(second.stderr)")

        // The columns: every old one kept, the new ones added with distinct, fitting names.
        let after = try Self.columns(s.p, of: "notes")
        #expect(before.allSatisfy { after[$0.key] == $0.value }, "no column disappeared or changed type")
        let changes = try Self.changes(s.p)
        let secondRun = try await DestinationSnapshot.read(s.p).runStatuses.count
        #expect(changes.allSatisfy { $0[6] == String(secondRun) }, "\(changes)")
        func column(of field: String) -> String? { changes.first { $0[1] == "Note" && $0[3] == field }?[4] ?? nil }
        #expect(column(of: "mood") == "mood" && after["mood"] == "text")
        #expect(column(of: "foo_bar") == "foo_bar", "the name already in snake_case keeps it")
        let fooBar = column(of: "fooBar") ?? ""
        #expect(fooBar.hasPrefix("foo_bar_") && fooBar.utf8.count == "foo_bar_".utf8.count + 8 && after[fooBar] == "bigint", "\(fooBar)")
        #expect(changes.contains { $0[3] == "fooBar" && $0[7]!.contains("foo_bar is taken by foo_bar") }, "\(changes)")
        let longColumn = column(of: long) ?? ""
        #expect(longColumn.utf8.count <= 63 && longColumn.hasPrefix("a_field_name_that_goes_on") && after[longColumn] == "double precision", "\(longColumn)")
        let shadow = column(of: "recordName") ?? ""
        #expect(shadow.hasPrefix("record_name_") && after[shadow] == "text", "\(shadow)")
        let hostileColumn = column(of: hostile) ?? ""
        let hostileSnakeCased = "\u{600}\"\tint);\tdrop\ttable\tzonefeed_checkpoints;__"
        #expect(Array(hostileColumn.utf8) == Array(hostileSnakeCased.utf8) && after[hostileColumn] == "text", "\(hostileColumn.debugDescription)")
        #expect(changes.contains { $0[0] == "table_created" && $0[1] == "Comment" && $0[2] == "comment" })
        #expect(try Self.columns(s.p, of: "comment")["likes"] == "bigint")

        try Connection.withConnection(s.p.url) { c in
            let schema = quoteIdentifier(s.p.schema)
            // The values are in their columns; the rows from before keep null.
            let mood = try c.query(
                """
                SELECT record_name, mood, foo_bar::text, \(quoteIdentifier(fooBar))::text, \(quoteIdentifier(longColumn))::text,
                       \(quoteIdentifier(shadow)), record_name, \(quoteIdentifier(hostileColumn))
                FROM \(schema).notes WHERE mood IS NOT NULL ORDER BY record_name
                """
            ).rows.map { Array($0) }
            #expect(mood.count == 2 && mood[0] == ["MOOD-1", "calm", "2", "1", "2.5", "shadow", "MOOD-1", "quoted"] && mood[1][1] == "tense", "\(mood)")
            let stillNull = try c.query("SELECT count(*) FROM \(schema).notes WHERE mood IS NULL AND record_name NOT IN ('MOOD-1', 'MOOD-2')").scalar
            let older = try c.query("SELECT count(*) FROM \(schema).notes WHERE record_name NOT IN ('MOOD-1', 'MOOD-2')").scalar
            #expect(stillNull == older && older != "0")
            let comment = try c.query("SELECT text, likes::text, note FROM \(schema).comment_live").rows.map { Array($0) }
            #expect(comment == [["first!", "3", "MOOD-1"]])
            // The view was made again with the table's new columns.
            #expect(try c.query("SELECT mood FROM \(schema).notes_live WHERE record_name = 'MOOD-1'").scalar == "calm")
        }
        // The conflicts: rejected with the field and both types named, on a column of the schema
        // file and on columns evolution made (in the batch that made them); nothing dropped.
        let snapshot = try await DestinationSnapshot.read(s.p)
        let rejects = snapshot.rejects.map { "\($0.recordName ?? "-"): \($0.error)" }
        #expect(
            rejects == [
                "CONFLICT-1: field wordCount: a STRING value cannot go into this column (column word_count, bigint)",
                "CONFLICT-2: field mood: an INT64 value cannot go into this column (column mood, text, made for STRING values)",
                "COMMENT-2: field likes: a DOUBLE value cannot go into this column (column likes, bigint, made for INT64 values)",
            ], "\(rejects)")
        #expect(try await s.liveDifferences(besides: ["MOOD-1", "MOOD-2"]) == [])

        // `status` shows the changes.
        let status = try await s.zonefeed.run(["status", s.file])
        #expect(status.stdout.contains("changes of shape"), "\(status.stdout)")
        #expect(status.stdout.contains("table created  comment"), "\(status.stdout)")
        #expect(status.stdout.range(of: #"column added\s+notes\s+mood\s+text"#, options: .regularExpression) != nil, "\(status.stdout)")

        // Frozen afterwards, the pipeline keeps using what evolution made: a deletion reaches the
        // table made for Comment, an update the column made for mood; a newer field goes to
        // `fields`, and nothing changes shape.
        var frozen = s.p
        frozen.moreSections += "schemaEvolution: freeze\n"
        _ = try frozen.write(to: s.zonefeed.directory)
        try await s.server.admin("records/delete", ["zone": "Zone01", "recordNames": ["COMMENT-1"]])
        try await s.server.admin(
            "records/add",
            [
                "zone": "Zone01",
                "records": try FakeServerProcess.wire([
                    Record(recordName: "MOOD-1", recordType: "Note", recordChangeTag: "m-1b", fields: ["mood": .string("serene"), "weather": .string("rain")])
                ]),
            ])
        let third = try await s.run()
        #expect(third.status == 0, "\(third.stderr)")
        #expect(try Self.changes(s.p).count == changes.count, "nothing changed shape")
        try Connection.withConnection(s.p.url) { c in
            let schema = quoteIdentifier(s.p.schema)
            #expect(try c.query("SELECT count(*) FROM \(schema).comment_live").scalar == "0")
            #expect(
                try c.query("SELECT record_type FROM \(schema).zonefeed_tombstones WHERE record_name = 'COMMENT-1'").rows.map { $0[0] } == ["Comment"])
            let mood = try c.query("SELECT mood, fields -> 'weather' ->> 'value', foo_bar::text FROM \(schema).notes WHERE record_name = 'MOOD-1'").rows
            #expect(mood.map { Array($0) } == [["serene", "rain", nil]], "the whole row replaced, the evolved columns too")
        }
    }

    /// A new field whose values come in two types: the first value types the column, and
    /// with `onBadRecord: fail` the other stops the run with both types named, and nothing of
    /// the batch, the new column included, is kept.
    @Test func withOnBadRecordFailATypeConflictStopsTheRunAndKeepsNothingOfItsBatch() async throws {
        let s = try await Setup("conflictfail", fake: FakeSettings(seed: 149, zones: 1, recordsPerZone: 200)) {
            $0.recordTypesSection = "recordTypes: auto\n"
            $0.tables = ["Note": "note", "Folder": "folder", "Tag": "tag"]
            $0.onBadRecord = "fail"
        }
        defer { s.stop() }
        let first = try await s.run()
        #expect(first.status == 0, "\(first.stderr)")
        let changesBefore = try Self.changes(s.p)
        try await s.server.admin(
            "records/add",
            [
                "zone": "Zone01",
                "records": try FakeServerProcess.wire([
                    Record(recordName: "MIXED-1", recordType: "Tag", recordChangeTag: "x-1", fields: ["weight": .string("heavy")]),
                    Record(recordName: "MIXED-2", recordType: "Tag", recordChangeTag: "x-2", fields: ["weight": .int64(7)]),
                ]),
            ])
        let second = try await s.run()
        #expect(second.status == 1, "\(second.stderr)")
        #expect(
            second.stderr.contains("field weight: an INT64 value cannot go into this column (column weight, text, made for STRING values)"),
            "\(second.stderr)")
        #expect(try Self.changes(s.p).count == changesBefore.count, "the column was not kept")
        #expect(try Self.columns(s.p, of: "tag")["weight"] == nil)
        #expect(try await !s.hasRow("MIXED-1", in: "Zone01"), "nothing of the batch was applied")
    }

    /// CloudKit gives one type more than one tag: an asset is `ASSETID` or `ASSET`, and a list
    /// of no known type (`UNKNOWN_LIST`, as an empty list may come) is any list. A field first
    /// seen so gets no column until a value says its type, and a column made for one tag takes
    /// the others of its type. Before, the column was made for the first tag met (jsonb for an
    /// empty list), and every record with another tag of the field was rejected whole.
    @Test func aFieldsOtherTagsOfItsTypeGoIntoTheColumnMadeForItsFirst() async throws {
        let s = try await Setup("evolvetags", fake: FakeSettings(seed: 152, zones: 1, recordsPerZone: 50)) {
            $0.recordTypesSection = "recordTypes: auto\n"
            $0.tables = ["Note": "note", "Folder": "folder", "Tag": "tag"]
        }
        defer { s.stop() }
        #expect(try await s.run().status == 0)
        let asset = JSONValue.object(["fileChecksum": .string("c1"), "size": .int(3)])
        let batches: [(String, [String: FieldValue])] = [
            ("LATE-1", ["labels": .list(tag: "UNKNOWN_LIST", []), "picture": .asset(tag: "ASSETID", asset)]),
            ("LATE-2", ["labels": .list(tag: "STRING_LIST", [.string("a"), .string("b")]), "picture": .asset(tag: "ASSET", asset)]),
            ("LATE-3", ["labels": .list(tag: "UNKNOWN_LIST", [])]),
        ]
        for (name, fields) in batches {
            try await s.server.admin(
                "records/add",
                ["zone": "Zone01", "records": try FakeServerProcess.wire([Record(recordName: name, recordType: "Tag", recordChangeTag: name, fields: fields)])])
            let run = try await s.run()
            #expect(run.status == 0, "\(run.stderr)")
            #expect(try await DestinationSnapshot.read(s.p).runRejects == 0, "\(name) is not rejected: \(run.stderr)")
            #expect(try await s.hasRow(name, in: "Zone01"))
            if name == "LATE-1" {
                #expect(try Self.columns(s.p, of: "tag")["labels"] == nil, "no column until a value says its type")
                #expect(try Self.columns(s.p, of: "tag")["picture"] == "jsonb")
            }
        }
        #expect(try Self.columns(s.p, of: "tag")["labels"] == "text[]")
        let labels = try Connection.withConnection(s.p.url) { c in
            try c.query(
                "SELECT record_name, labels::text, picture IS NOT NULL FROM \(quoteIdentifier(s.p.schema)).tag WHERE record_name LIKE 'LATE-%' ORDER BY 1"
            ).rows.map { [$0[0], $0[1], $0[2]] }
        }
        #expect(labels == [["LATE-1", nil, "t"], ["LATE-2", "{a,b}", "t"], ["LATE-3", "{}", "f"]], "\(labels)")
    }

    /// An analyst's long transaction reads the table a new field must be added to: the change
    /// waits its lock_timeout, three times, then the zone fails saying why (exit 1) with nothing
    /// applied; readers were held up a few seconds at a time, not for the whole query. Once the
    /// reader is done, the next run adds the column and applies the batch.
    @Test func aLongQueryOnTheTableMakesTheChangeWaitThenFailTheZoneUntilTheNextRun() async throws {
        let s = try await Setup("longquery", fake: FakeSettings(seed: 151, zones: 1, recordsPerZone: 200)) {
            $0.recordTypesSection = SchemaFileTests.recordTypes
        }
        defer { s.stop() }
        #expect(try await s.run().status == 0)
        try await s.server.admin(
            "records/add",
            [
                "zone": "Zone01",
                "records": try FakeServerProcess.wire([
                    Record(recordName: "LATE-1", recordType: "Tag", recordChangeTag: "l-1", fields: ["colour": .string("teal")])
                ]),
            ])
        let analyst = try Connection(s.p.url)
        defer { analyst.close() }
        try analyst.execute("BEGIN")
        _ = try analyst.query("SELECT count(*) FROM \(quoteIdentifier(s.p.schema)).tags")
        let blocked = try await s.run()
        #expect(blocked.status == 1, "\(blocked.stderr)")
        #expect(blocked.stderr.contains("waited 5s for the table 4 times: a long query holds it"), "\(blocked.stderr)")
        #expect(try await !s.hasRow("LATE-1", in: "Zone01"))
        try analyst.execute("COMMIT")

        let next = try await s.run()
        #expect(next.status == 0, "\(next.stderr)")
        #expect(try await s.hasRow("LATE-1", in: "Zone01"))
        #expect(try Self.columns(s.p, of: "tags")["colour"] == "text")
    }

    /// The pipeline's evolution lock is held by the test until both processes wait on it (seen
    /// in pg_locks): both met the new field before either could add it. Released, one adds the
    /// column and the other finds it made. The server keeps its latency but accepts every web
    /// auth token it issued: two processes sharing one signed-in session each follow their own
    /// chain of tokens, which a server that accepts only the newest refuses (README, "Two
    /// processes of one pipeline"), and that is not what this test is about.
    @Test func twoProcessesMeetingTheSameNewFieldAtOnceAddItOnceAndApplyBoth() async throws {
        let s = try await Setup("twomeet", fake: FakeSettings(seed: 139, zones: 2, recordsPerZone: 300), server: ["--latency", "20,10"]) {
            $0.recordTypesSection = SchemaFileTests.recordTypes
        }
        defer { s.stop() }
        let first = try await s.run()
        #expect(first.status == 0, "\(first.stderr)")
        for zone in ["Zone01", "Zone02"] {
            try await s.server.admin(
                "records/add",
                [
                    "zone": zone,
                    "records": try FakeServerProcess.wire(
                        (1...3).map {
                            Record(recordName: "\(zone)-MOOD-\($0)", recordType: "Note", recordChangeTag: "m", fields: ["mood": .string("\(zone) \($0)")])
                        }
                    ),
                ])
        }

        let door = try Connection(s.p.url)
        defer { door.close() }
        let key = "zonefeed:\(s.p.schema):\(s.p.name)"
        try door.query("SELECT pg_advisory_lock(hashtext($1), hashtext('schema evolution'))", [key])
        var z = s.zonefeed
        z.environment.merge(s.p.environment) { _, new in new }
        let a = try await z.start(["run", s.file, "--progress", "never", "--zone", "Zone01"])
        let b = try await z.start(["run", s.file, "--progress", "never", "--zone", "Zone02"])
        var waiting = 0
        let deadline = Date().addingTimeInterval(90)
        while waiting < 2 && Date() < deadline && (a.isRunning || b.isRunning) {
            try await Task.sleep(for: .milliseconds(50))
            waiting = Int(
                try door.query(
                    """
                    SELECT count(*) FROM pg_locks AS l JOIN pg_stat_activity AS s ON s.pid = l.pid
                    WHERE l.locktype = 'advisory' AND NOT l.granted AND s.application_name = $1
                      AND l.objid::text::bigint = (hashtext('schema evolution')::bigint & 4294967295)
                    """, ["zonefeed/\(s.p.name)"]
                ).scalar ?? "0")!
        }
        #expect(waiting == 2, "both processes wait to add the field at once")
        try door.query("SELECT pg_advisory_unlock(hashtext($1), hashtext('schema evolution'))", [key])
        let (ra, rb) = await (a.wait(), b.wait())
        #expect(ra.status == 0, "\(ra.stderr)")
        #expect(rb.status == 0, "\(rb.stderr)")

        let added = try Self.changes(s.p).filter { $0[3] == "mood" }
        #expect(added.count == 1, "\(added)")
        #expect([ra.stderr, rb.stderr].filter { $0.contains("added a column for a new field") }.count == 1)
        let moods = try Connection.withConnection(s.p.url) { c in
            try c.query("SELECT record_name, mood FROM \(quoteIdentifier(s.p.schema)).notes WHERE mood IS NOT NULL ORDER BY 1").rows.map { Array($0) }
        }
        #expect(moods.count == 6 && moods.allSatisfy { $0[1] == $0[0]!.replacingOccurrences(of: "-MOOD-", with: " ") }, "\(moods)")
        #expect(try await DestinationSnapshot.read(s.p).rejects.isEmpty)
        #expect(try await s.liveDifferences(besides: Set(moods.map { $0[0]! })) == [])
    }
}
