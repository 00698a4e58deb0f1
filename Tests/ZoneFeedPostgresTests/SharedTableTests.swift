import FakeCloudKit
import LibPQ
import TestSupport
import Testing
import ZoneFeedPostgres

/// Pipelines may share a schema, never a table: rows are keyed by zone and record name, not by
/// pipeline, so a second pipeline mapped to a first's table took its rows as its own, and the
/// second's resync swept every row of the first's zones of the same names into tombstones.
@Suite struct SharedTableTests {
    /// Two pipelines of the same fake feed's shape: zones of the same names, the same tables.
    static func twoPipelines(_ prefix: String) async throws -> (first: FakePipeline, second: FakePipeline) {
        let first = try await FakePipeline(prefix: prefix, fake: FakeSettings(seed: 3, zones: 1, recordsPerZone: 200))
        var second = try await FakePipeline(prefix: prefix + "b", fake: FakeSettings(seed: 4, zones: 1, recordsPerZone: 50))
        second.schema = first.schema
        return (first, second)
    }

    static func prepareRefusal(_ p: FakePipeline) async -> SharedTableRefusal? {
        guard let destination = try? p.destination() else { return nil }
        let refusal = await #expect(throws: SharedTableRefusal.self) { try await destination.prepare() }
        await destination.close()
        return refusal
    }

    static func liveRows(_ p: FakePipeline, in table: String) throws -> Int {
        try Connection.withConnection(p.url) { c in
            try c.query("SELECT count(*) FROM \(quoteIdentifier(p.schema)).\(quoteIdentifier(table)) WHERE deleted_at IS NULL").scalar(as: Int.self)
        }
    }

    @Test func aSecondPipelineMappedToAnotherPipelinesTableIsRefusedAndItsRowsStayLive() async throws {
        let (first, second) = try await Self.twoPipelines("shared")
        try await first.run()
        let live = try Self.liveRows(first, in: "notes")
        #expect(live > 0)

        // A resync of the second would have swept the first's rows of zone-0 into tombstones.
        let refusal = await Self.prepareRefusal(second)
        let text = refusal?.description ?? ""
        #expect(text.hasPrefix("table \(first.schema).folders is written by pipeline \(first.name); "), "\(text)")
        #expect(text.contains("table \(first.schema).notes is written by pipeline \(first.name)"), "\(text)")
        #expect(text.contains("pipeline \(second.name) maps a record type to it"), "\(text)")
        let (checkpoints, runs) = try Connection.withConnection(first.url) { c in
            let schema = quoteIdentifier(first.schema)
            return (
                try c.query("SELECT count(*) FROM \(schema).zonefeed_checkpoints WHERE pipeline = $1", [second.name]).scalar(as: Int.self),
                try c.query("SELECT count(*) FROM \(schema).zonefeed_runs WHERE pipeline = $1", [second.name]).scalar(as: Int.self)
            )
        }
        #expect(checkpoints == 0 && runs == 0, "the second pipeline wrote nothing")
        #expect(try Self.liveRows(first, in: "notes") == live)
        #expect(try await DestinationSnapshot.read(first).differences(from: first.expected()) == [])

        // The first goes on as before.
        #expect(try await first.run().status == .succeeded)

        // The way out the refusal gives when the other pipeline is gone (renamed): its release
        // statement, run as written, lets the second take the tables.
        let release = try #require(text.range(of: "release its tables: ").map { String(text[$0.upperBound...]) })
        #expect(
            release
                == "DELETE FROM \(quoteIdentifier(first.schema)).zonefeed_tables WHERE pipeline = '\(first.name)' AND table_name IN ('folders', 'notes', 'tags')"
        )
        _ = try Connection.withConnection(first.url) { c in try c.execute(release) }
        #expect(try await second.run().status == .succeeded)
        // And now the first is the one refused.
        #expect(await Self.prepareRefusal(first)?.description.hasPrefix("table \(first.schema).folders is written by pipeline \(second.name)") == true)
    }

    /// A table's name is one element of the claims' array and one literal of the release
    /// statement whatever it holds. A quote followed by a combining mark is one Character to
    /// Swift, and was left unescaped: the array was malformed (every run of the pipeline failed
    /// before writing), and the release statement's literal ended early, the rest run as SQL
    /// by whoever pasted it.
    @Test(arguments: [("q\"\u{301}", #"q\"\u0301"#), ("o'\u{301}; DROP TABLE keep; --", #"o'\u0301; DROP TABLE keep; --"#)])
    func aTableNamedWithAQuoteAndAMarkIsClaimedAndReleasedAsItIsWritten(name: String, yaml: String) async throws {
        var (first, second) = try await Self.twoPipelines("marks")
        for i in [0, 1] {
            var p = i == 0 ? first : second
            p.mappedTypes = ["Tag"]
            p.recordTypesSection = "recordTypes:\n  Tag:\n    table: \"\(yaml)\"\n"
            p.tables = ["Tag": name]
            if i == 0 { first = p } else { second = p }
        }
        try await first.run()
        #expect(try Self.liveRows(first, in: name) > 0)
        _ = try Connection.withConnection(first.url) { c in try c.execute("CREATE TABLE \(quoteIdentifier(first.schema)).keep (id int)") }
        let text = await Self.prepareRefusal(second)?.description ?? ""
        let release = try #require(text.range(of: "release its tables: ").map { String(text[$0.upperBound...]) }, "\(text)")
        _ = try Connection.withConnection(first.url) { c in try c.execute(release) }
        let kept = try Connection.withConnection(first.url) { c in
            try c.query("SELECT to_regclass($1) IS NOT NULL", [quoteIdentifier(first.schema) + ".keep"]).scalar(as: Bool.self)
        }
        #expect(kept, "the statement released the table and did nothing else")
        #expect(try await second.run().status == .succeeded)
    }

    @Test func aTableDroppedByHandFreesItsNameForAnotherPipeline() async throws {
        let (first, second) = try await Self.twoPipelines("dropped")
        try await first.run()
        try Connection.withConnection(first.url) { c in
            for table in ["notes", "folders", "tags"] { try c.execute("DROP TABLE \(quoteIdentifier(first.schema)).\(table) CASCADE") }
        }
        #expect(try await second.run().status == .succeeded)
        #expect(try await DestinationSnapshot.read(second).differences(from: second.expected()) == [])
        let owners = try Connection.withConnection(first.url) { c in
            try c.query("SELECT DISTINCT pipeline FROM \(quoteIdentifier(first.schema)).zonefeed_tables").rows.map { try $0.decode(0, as: String.self) }
        }
        #expect(owners == [second.name])
    }

    /// A name another pipeline has claimed is not one evolution gives a new table, even once
    /// that table was dropped (to be rebuilt): taking it locked the other pipeline out.
    @Test func evolutionDoesNotNameATableAfterAnotherPipelinesClaim() async throws {
        var (first, second) = try await Self.twoPipelines("claimed")
        first.recordTypesSection = "recordTypes:\n  Folder:\n    table: folder\n"
        first.mappedTypes = ["Folder"]
        try await first.run()
        _ = try Connection.withConnection(first.url) { c in try c.execute("DROP TABLE \(quoteIdentifier(first.schema)).folder CASCADE") }
        second.recordTypesSection = "recordTypes: auto\n"
        #expect(try await second.run().status == .succeeded)
        let owners = try Connection.withConnection(first.url) { c in
            try c.query("SELECT table_name || ' ' || pipeline FROM \(quoteIdentifier(first.schema)).zonefeed_tables ORDER BY 1").rows.map {
                try $0.decode(0, as: String.self)
            }
        }
        #expect(owners.contains("folder \(first.name)"), "\(owners)")
        #expect(!owners.contains("folder \(second.name)"), "\(owners)")
        #expect(try await first.run().status == .succeeded, "the first makes its table again")
    }

    @Test func aTableMadeByEvolutionIsItsPipelinesAlone() async throws {
        var (first, second) = try await Self.twoPipelines("evolved")
        first.recordTypesSection = "recordTypes: auto\n"
        first.tables = ["Note": "note", "Folder": "folder", "Tag": "tag"]
        try await first.run()
        // The second maps Folder by hand to the table the first's evolution made for it.
        second.recordTypesSection = "recordTypes:\n  Folder:\n    table: folder\n"
        let refusal = await Self.prepareRefusal(second)
        #expect(refusal?.others.map(\.table) == ["folder"], "\(String(describing: refusal))")
        #expect(refusal?.others.map(\.pipeline) == [first.name])
    }
}
