import CloudKitModel
import FakeCloudKit
import Foundation
import LibPQ
import ZoneFeed

/// What a pipeline's tables hold, read back for comparison with `ExpectedState`.
public struct DestinationSnapshot: Sendable {
    public struct Row: Equatable, Sendable, CustomStringConvertible {
        public var recordType: String
        public var changeTag: String?
        public var deleted: Bool
        public var description: String { "\(recordType) \(changeTag ?? "-")\(deleted ? " deleted" : "")" }
    }

    /// Each record's row; of a name with rows in several tables, the live one.
    public var rows: [ExpectedState.Key: Row] = [:]
    /// Names with a live row in more than one table: a record has one type.
    public var namesLiveInTwoTables: [String] = []
    /// Sums over every run of the pipeline.
    public var runPages = 0, runUpserts = 0, runTombstones = 0, runRejects = 0, runSkipped = 0
    public var tombstonesByReason: [String: Int] = [:]
    public var rejects: [(recordName: String?, error: String, raw: String?)] = []
    public var runStatuses: [String] = []

    public static func read(_ p: FakePipeline) async throws -> DestinationSnapshot {
        try await Connection.withConnectionOffPool(p.url) { c in
            var snapshot = DestinationSnapshot()
            let schema = quoteIdentifier(p.schema)
            for type in p.mappedTypes {
                let table = p.tables[type]!
                for r in try c.query("SELECT zone_name, record_name, record_type, change_tag, deleted_at IS NOT NULL FROM \(schema).\(table)").rows {
                    let key = ExpectedState.Key(zoneName: r[0]!, recordName: r[1]!)
                    let row = Row(recordType: r[2]!, changeTag: r[3], deleted: r[4] == "t")
                    if let other = snapshot.rows[key] {
                        if !other.deleted && !row.deleted { snapshot.namesLiveInTwoTables.append("\(key.zoneName)/\(key.recordName)") }
                        if !other.deleted { continue }
                    }
                    snapshot.rows[key] = row
                }
            }
            let sums = try c.query(
                """
                SELECT coalesce(sum(pages),0), coalesce(sum(upserts),0), coalesce(sum(tombstones),0), coalesce(sum(rejects),0), coalesce(sum(skipped),0)
                FROM \(schema).zonefeed_runs WHERE pipeline = $1
                """, [p.name]
            ).rows[0].map { Int($0!)! }
            (snapshot.runPages, snapshot.runUpserts, snapshot.runTombstones, snapshot.runRejects, snapshot.runSkipped) = (
                sums[0], sums[1], sums[2], sums[3], sums[4]
            )
            for r in try c.query("SELECT reason, count(*) FROM \(schema).zonefeed_tombstones WHERE pipeline = $1 GROUP BY 1", [p.name]).rows {
                snapshot.tombstonesByReason[r[0]!] = Int(r[1]!)!
            }
            snapshot.rejects = try c.query("SELECT record_name, error, raw::text FROM \(schema).zonefeed_rejects WHERE pipeline = $1 ORDER BY id", [p.name])
                .rows.map { ($0[0], $0[1]!, $0[2]) }
            snapshot.runStatuses = try c.query("SELECT status FROM \(schema).zonefeed_runs WHERE pipeline = $1 ORDER BY run_id", [p.name]).rows.map { $0[0]! }
            return snapshot
        }
    }

    /// Every key whose row differs from the expected one, as readable lines (empty when equal).
    public func differences(from expected: ExpectedState, limit: Int = 10) -> [String] {
        var out: [String] = []
        for (key, row) in expected.rows.sorted(by: { $0.key < $1.key }) {
            let want = Row(recordType: row.record.recordType, changeTag: row.record.recordChangeTag, deleted: row.deleted)
            if rows[key] != want { out.append("\(key.zoneName)/\(key.recordName): expected \(want), found \(rows[key].map(\.description) ?? "no row")") }
        }
        for name in namesLiveInTwoTables.sorted() { out.append("\(name): live in two tables") }
        for key in rows.keys where expected.rows[key] == nil {
            out.append("\(key.zoneName)/\(key.recordName): expected no row, found \(rows[key]!)")
        }
        return Array(out.prefix(limit)) + (out.count > limit ? ["… and \(out.count - limit) more"] : [])
    }
}

/// Compares every mapped column of the Note table with the values the generator produced.
public enum NoteColumns {
    /// `everyField`: every field has a column of its own (`recordTypes: auto`), so `fields`
    /// holds nothing and `secret` and `trail` have columns too.
    public static func differences(
        _ p: FakePipeline, expected: ExpectedState, related: String = "related_notes", everyField: Bool = false, limit: Int = 10
    ) async throws -> [String] {
        try await Connection.withConnectionOffPool(p.url) { c in
            let rows = try c.query(
                """
                SELECT zone_name, record_name, title, body, word_count::text, rating::text,
                       (extract(epoch FROM edited_at) * 1000)::bigint::text,
                       replace(encode(thumbnail, 'base64'), E'\\n', ''), folder, attachment::text, place::text,
                       array_to_json(tags)::text, array_to_json(counts)::text, array_to_json(scores)::text,
                       (SELECT json_agg((extract(epoch FROM x) * 1000)::bigint ORDER BY o) FROM unnest(reminders) WITH ORDINALITY AS u(x, o))::text,
                       (SELECT json_agg(replace(encode(x, 'base64'), E'\\n', '') ORDER BY o) FROM unnest(chunks) WITH ORDINALITY AS u(x, o))::text,
                       array_to_json(\(related))::text, fields::text,
                       (extract(epoch FROM created_at) * 1000)::bigint::text, (extract(epoch FROM modified_at) * 1000)::bigint::text,
                       created_by, modified_by\(everyField ? ", replace(encode(secret, 'base64'), E'\\n', ''), trail::text" : "")
                FROM \(quoteIdentifier(p.schema)).\(quoteIdentifier(p.tables["Note"]!))
                """
            ).rows
            var out: [String] = []
            for r in rows {
                let key = ExpectedState.Key(zoneName: r[0]!, recordName: r[1]!)
                guard let record = expected.rows[key]?.record else { continue }
                var problems: [String] = []
                func check(_ column: String, _ ok: Bool) { if !ok { problems.append(column) } }
                let f = record.fields
                check("title", r[2] == f["title"].flatMap(string))
                check("body", r[3] == f["body"].flatMap(string))
                check("word_count", r[4].flatMap { Int64($0) } == f["wordCount"].flatMap(int64))
                check("rating", sameDouble(r[5], f["rating"]))
                check("edited_at", r[6].flatMap { Int64($0) } == f["editedAt"].flatMap(timestamp))
                check("thumbnail", r[7] == f["thumbnail"].flatMap(bytes))
                check("folder", r[8] == f["folder"].flatMap(referenceName))
                check("attachment", sameJSON(r[9], f["attachment"]?.json))
                check("place", sameJSON(r[10], f["place"]?.json))
                check("tags", sameJSON(r[11], f["tags"]?.json))
                check("counts", sameJSON(r[12], f["counts"]?.json))
                check("scores", sameJSON(r[13], f["scores"]?.json))
                check("reminders", sameJSON(r[14], listOrNil(f["reminders"])))
                check("chunks", sameJSON(r[15], listOrNil(f["chunks"])))
                check(
                    "related_notes",
                    sameJSON(
                        r[16],
                        f["related"].map { v -> JSONValue in
                            guard case .list(_, let items) = v else { return .null }
                            return .array(items.map { .string(referenceName($0) ?? "") })
                        }))
                var mapped: Set = [
                    "title", "body", "wordCount", "rating", "editedAt", "thumbnail", "folder", "attachment", "place",
                    "tags", "counts", "scores", "reminders", "chunks", "related",
                ]
                if everyField {
                    mapped.formUnion(["secret", "trail"])
                    check("secret", r[22] == f["secret"].flatMap(encryptedBytes))
                    check("trail", sameJSON(r[23], f["trail"]?.json))
                }
                let unmapped = JSONValue.object(f.filter { !mapped.contains($0.key) }.mapValues { .object(["type": .string($0.typeTag), "value": $0.json]) })
                check("fields", sameJSON(r[17], unmapped))
                check("created_at", r[18].flatMap { Int64($0) } == record.created?.timestamp)
                check("modified_at", r[19].flatMap { Int64($0) } == record.modified?.timestamp)
                check("created_by", r[20] == record.created?.userRecordName)
                check("modified_by", r[21] == record.modified?.userRecordName)
                if !problems.isEmpty { out.append("\(key.recordName): \(problems.joined(separator: ", ")) differ") }
            }
            if rows.isEmpty { out.append("the \(p.tables["Note"]!) table is empty") }
            return Array(out.prefix(limit))
        }
    }

    static func string(_ v: FieldValue) -> String? {
        if case .string(let s) = v { return s }
        return nil
    }
    static func int64(_ v: FieldValue) -> Int64? {
        if case .int64(let i) = v { return i }
        return nil
    }
    static func timestamp(_ v: FieldValue) -> Int64? {
        if case .timestamp(let i) = v { return i }
        return nil
    }
    static func encryptedBytes(_ v: FieldValue) -> String? {
        if case .encryptedBytes(let b) = v { return b }
        return nil
    }
    static func bytes(_ v: FieldValue) -> String? {
        if case .bytes(let b) = v { return b }
        return nil
    }
    static func referenceName(_ v: FieldValue) -> String? {
        if case .reference(let r) = v { return r.recordName }
        return nil
    }

    /// PostgreSQL's json_agg of an empty set is NULL; an empty list is an empty array.
    static func listOrNil(_ v: FieldValue?) -> JSONValue? {
        guard let v, case .list(_, let items) = v else { return nil }
        return items.isEmpty ? nil : v.json
    }

    static func sameDouble(_ text: String?, _ v: FieldValue?) -> Bool {
        guard let v, case .double(let want) = v else { return text == nil }
        guard let text, let got = Double(text) else { return false }
        return got.bitPattern == want.bitPattern
    }

    static func sameJSON(_ text: String?, _ want: JSONValue?) -> Bool {
        guard let want else { return text == nil }
        guard let text, let got = try? JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)) else { return false }
        return equal(got, want)
    }

    /// JSON equality where 1 and 1.0 are the same number, as they are in jsonb.
    static func equal(_ a: JSONValue, _ b: JSONValue) -> Bool {
        switch (a, b) {
        case (.int(let x), .double(let y)), (.double(let y), .int(let x)): return Double(x) == y
        case (.array(let x), .array(let y)): return x.count == y.count && zip(x, y).allSatisfy { equal($0, $1) }
        case (.object(let x), .object(let y)): return x.keys.sorted() == y.keys.sorted() && x.allSatisfy { equal($0.value, y[$0.key]!) }
        default: return a == b
        }
    }
}
