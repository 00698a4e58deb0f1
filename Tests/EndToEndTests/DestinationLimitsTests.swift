import CloudKitModel
import FakeCloudKit
import Foundation
import LibPQ
import TestSupport
import Testing

/// What PostgreSQL cannot take, met as a user would: field names that are PostgreSQL's own
/// columns, records with more fields than a table holds, and tables already there of another
/// shape. The record loads, or the table is named before anything is written; no pipeline is
/// stuck for good.
@Suite struct DestinationLimitsTests {
    typealias Setup = CloudKitEndToEndTests.Setup

    func query(_ s: Setup, _ sql: String) throws -> [[String?]] {
        try Connection.withConnection(s.p.url) { c in try c.query(sql).rows.map { Array($0) } }
    }

    /// `ctid`, `xmin` and `tableoid` are PostgreSQL's columns of every table: under `auto`, the
    /// fields of those names get other column names (`ctid_…`), recorded, and their values land.
    @Test func fieldsNamedAsPostgreSQLsSystemColumnsGetColumnsOfTheirOwn() async throws {
        let s = try await Setup("sysnames", fake: FakeSettings(seed: 301, zones: 1, recordsPerZone: 50)) {
            $0.recordTypesSection = "recordTypes: auto\n"
            $0.tables = ["Note": "note", "Folder": "folder", "Tag": "tag"]
        }
        defer { s.stop() }
        let record = Record(
            recordName: "SYS-1", recordType: "Probe", recordChangeTag: "s1",
            fields: ["ctid": .string("c"), "xmin": .int64(7), "tableoid": .string("t"), "cmax": .double(1.5)])
        try await s.server.admin("records/add", ["zone": "Zone01", "records": try FakeServerProcess.wire([record])])
        let first = try await s.run()
        #expect(first.status == 0, "\(first.stderr)")
        let columns = try SchemaEvolutionTests.columns(s.p, of: "probe").keys.filter { !$0.hasPrefix("_") }
        for name in ["ctid", "xmin", "tableoid", "cmax"] {
            #expect(columns.contains { $0.hasPrefix("\(name)_") && $0.count == name.count + 9 }, "\(name): \(columns.sorted())")
        }
        let why = try query(
            s, "SELECT why FROM \(quoteIdentifier(s.p.schema)).zonefeed_schema_changes WHERE field = 'xmin'")
        #expect(why.first?.first??.contains("xmin is reserved") == true, "\(why)")
        let second = try await s.run()
        #expect(second.status == 0, "and every later run: \(second.stderr)")
    }

    /// A record of 2,000 fields under `auto`: its table gets 400 columns (a row of more would
    /// not fit a page), the other fields stay in `fields`, and the record loads whole; one of
    /// 100,000 fields loads too, in bounded work: the CPU its run takes, as the shell's `times`
    /// reads it, which the other tests running at once on a small machine do not stretch as they
    /// stretch the clock (the whole test took 10 s alone on two cores, 133 s among the others).
    @Test func aRecordWithMoreFieldsThanATableTakesLoadsWithTheRestInFields() async throws {
        let s = try await Setup("widerecord", fake: FakeSettings(seed: 303, zones: 1, recordsPerZone: 20)) {
            $0.recordTypesSection = "recordTypes: auto\n"
            $0.tables = ["Note": "note", "Folder": "folder", "Tag": "tag"]
        }
        defer { s.stop() }
        var fields: [String: FieldValue] = [:]
        for i in 0..<2_000 { fields[String(format: "f%04d", i)] = .int64(Int64(i)) }
        try await s.server.admin(
            "records/add",
            [
                "zone": "Zone01",
                "records": try FakeServerProcess.wire([Record(recordName: "WIDE-1", recordType: "Wide", recordChangeTag: "w1", fields: fields)]),
            ])
        let run = try await s.run()
        #expect(run.status == 0, "\(run.stderr)")
        let columns = try SchemaEvolutionTests.columns(s.p, of: "wide")
        #expect(columns.keys.filter { $0.hasPrefix("f") && $0 != "fields" }.count == RecordTypeMappingLimit.columns)
        let row = try query(
            s,
            """
            SELECT f0000::text, f0399::text, fields->'f0400'->>'value', fields->'f1999'->>'value', (SELECT count(*) FROM jsonb_object_keys(fields))::text
            FROM \(quoteIdentifier(s.p.schema)).wide WHERE record_name = 'WIDE-1'
            """)
        #expect(row == [["0", "399", "400", "1999", "1600"]], "400 in columns, 1,600 in fields")

        var huge: [String: FieldValue] = [:]
        for i in 0..<100_000 { huge["h\(i)"] = .int64(Int64(i)) }
        try await s.server.admin(
            "records/add",
            ["zone": "Zone01", "records": try FakeServerProcess.wire([Record(recordName: "HUGE-1", recordType: "Huge", recordChangeTag: "h1", fields: huge)])])
        let (hugeRun, cpuSeconds) = try await runCountingCPU(s)
        #expect(hugeRun.status == 0, "\(hugeRun.stderr)")
        #expect(cpuSeconds < 60, "not 88 s for the record alone")
        let keys = try query(s, "SELECT (SELECT count(*) FROM jsonb_object_keys(fields))::text FROM \(quoteIdentifier(s.p.schema)).huge")
        #expect(keys == [["99600"]])
    }

    /// `zonefeed run` through /bin/sh, and the user and system seconds it took, from the shell's
    /// `times` (its second line is what the shell's children used).
    func runCountingCPU(_ s: Setup) async throws -> (ZonefeedBinary.Output, Double) {
        var z = s.zonefeed
        z.environment.merge(s.p.environment) { _, new in new }
        let output = try await z.shell("'\(ZonefeedBinary.path)' run '\(s.file)' --progress never; status=$?; times >&2; exit $status")
        // "0m1.250s 0m0.310s": minutes and seconds, user then system.
        let children = output.stderr.split(separator: "\n").last { $0.contains("m") && $0.hasSuffix("s") } ?? ""
        let seconds = children.split(separator: " ").map { time -> Double in
            let parts = time.dropLast().split(separator: "m")
            return parts.count == 2 ? (Double(parts[0]) ?? .infinity) * 60 + (Double(parts[1]) ?? .infinity) : .infinity
        }
        return (output, seconds.count == 2 ? seconds.reduce(0, +) : .infinity)
    }

    /// A table that zonefeed did not make, under one of its names: named, with what it has and
    /// what is needed, and nothing is written, not even the tables zonefeed would have made.
    @Test(arguments: [
        ("CREATE TABLE %@.zonefeed_checkpoints (pipeline integer, note text)", "zonefeed_checkpoints", "pipeline is integer, not text"),
        (
            """
            CREATE TABLE %@.notes (zone_owner text, zone_name text, record_name text, record_type text, change_tag text, created_at text,
                modified_at text, created_by text, modified_by text, deleted_at text, synced_at text, run_id text, generation text,
                title text, fields text)
            """, "notes", "created_at is text, not timestamp with time zone"
        ),
        // Every column right, but no key (made by hand, or restored without its constraints):
        // rows copied straight in would meet no key, and a record on two pages have two rows.
        (
            """
            CREATE TABLE %@.notes (zone_owner text, zone_name text, record_name text, record_type text, change_tag text,
                created_at timestamptz, modified_at timestamptz, created_by text, modified_by text, deleted_at timestamptz,
                synced_at timestamptz, run_id bigint, generation integer, fields jsonb)
            """, "notes", "no primary key or unique index on (zone_owner, zone_name, record_name)"
        ),
        // A key ON CONFLICT cannot take: its columns only included, or checked at commit.
        (
            """
            CREATE TABLE %@.notes (zone_owner text, zone_name text, record_name text, record_type text, change_tag text,
                created_at timestamptz, modified_at timestamptz, created_by text, modified_by text, deleted_at timestamptz,
                synced_at timestamptz, run_id bigint, generation integer, fields jsonb,
                UNIQUE (record_name) INCLUDE (zone_owner, zone_name))
            """, "notes", "no primary key or unique index on (zone_owner, zone_name, record_name)"
        ),
        (
            """
            CREATE TABLE %@.notes (zone_owner text, zone_name text, record_name text, record_type text, change_tag text,
                created_at timestamptz, modified_at timestamptz, created_by text, modified_by text, deleted_at timestamptz,
                synced_at timestamptz, run_id bigint, generation integer, fields jsonb,
                PRIMARY KEY (zone_owner, zone_name, record_name) DEFERRABLE)
            """, "notes", "ADD PRIMARY KEY (zone_owner, zone_name, record_name)"
        ),
    ])
    func aTableOfAnotherShapeIsNamedBeforeAnythingIsWritten(create: String, table: String, says: String) async throws {
        let s = try await Setup("shape", fake: FakeSettings(seed: 305, zones: 1, recordsPerZone: 50))
        defer { s.stop() }
        let schema = quoteIdentifier(s.p.schema)
        try Connection.withConnection(s.p.url) { c in
            try c.execute("CREATE SCHEMA \(schema)")
            try c.execute(create.replacingOccurrences(of: "%@", with: schema))
        }
        let run = try await s.run()
        #expect(run.status == 1, "\(run.stderr)")
        #expect(run.stderr.contains("table \(s.p.schema).\(table) is not of the shape zonefeed writes"), "\(run.stderr)")
        #expect(run.stderr.contains(says), "\(run.stderr)")
        #expect(run.stderr.contains("give the pipeline another destination.schema"), "\(run.stderr)")
        let tables = try query(s, "SELECT count(*)::text FROM pg_tables WHERE schemaname = '\(s.p.schema)'")
        #expect(tables == [["1"]], "nothing was made beside the table that was there")
    }

    /// A trigger a team added to a table casts a field, and PostgreSQL's refusal quotes the
    /// record's value (`invalid input syntax for type bigint: "…"`): the run fails and says the
    /// SQLSTATE, the zone and the table, but the value reaches neither zonefeed_runs.error, nor
    /// the checkpoint's last error, nor `zonefeed status`, nor the log.
    @Test func aRowValueInPostgreSQLsMessageIsKeptOutOfTheRunsErrorStatusAndLog() async throws {
        let s = try await Setup("rowvalue", fake: FakeSettings(seed: 307, zones: 1, recordsPerZone: 20))
        defer { s.stop() }
        let first = try await s.run()
        #expect(first.status == 0, "\(first.stderr)")
        let schema = quoteIdentifier(s.p.schema)
        try Connection.withConnection(s.p.url) { c in
            _ = try c.execute(
                """
                CREATE FUNCTION \(schema).title_is_a_number() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN PERFORM NEW.title::bigint; RETURN NEW; END $$;
                CREATE TRIGGER title_is_a_number BEFORE INSERT OR UPDATE ON \(schema).notes FOR EACH ROW
                    WHEN (NEW.record_name = 'ROW-VALUE-1') EXECUTE FUNCTION \(schema).title_is_a_number()
                """)
        }
        let secret = "zf-row-value-\(UUID().uuidString)"
        try await s.server.admin(
            "records/add",
            [
                "zone": "Zone01",
                "records": try FakeServerProcess.wire([
                    Record(recordName: "ROW-VALUE-1", recordType: "Note", recordChangeTag: "v1", fields: ["title": .string(secret)])
                ]),
            ])

        let failed = try await s.run()
        #expect(failed.status == 1, "\(failed.stderr)")
        let runError = try query(s, "SELECT error FROM \(schema).zonefeed_runs ORDER BY run_id DESC LIMIT 1").first?.first ?? nil
        let error = try #require(runError, "the failed run has an error")
        #expect(error.contains("applying a batch of zone Zone01: PostgreSQL error 22P02 in table notes: "), "\(error)")
        #expect(error.contains("a value is not valid input for its column's type"), "\(error)")
        let lastErrors = try query(s, "SELECT coalesce(string_agg(last_error, ' '), '') FROM \(schema).zonefeed_checkpoints")
        let status = try await s.zonefeed.run(["status", s.file])
        #expect(status.stdout.contains("22P02"), "status shows the run's error: \(status.stdout)")
        #expect(failed.stderr.contains("22P02"), "the log says the SQLSTATE: \(failed.stderr)")
        for (place, text) in [
            ("zonefeed_runs.error", error), ("last_error", "\(lastErrors)"), ("status", status.stdout + status.stderr), ("the log", failed.stderr),
        ] {
            #expect(!text.contains(secret) && !text.contains("zf-row-value"), "\(place) holds no row value: \(text)")
        }
    }
}

/// The limit the README documents, as the test reads it.
enum RecordTypeMappingLimit {
    static let columns = 400
}
