import FakeCloudKit
import Foundation
import LibPQ
import Synchronization
import TestSupport
import Testing
import ZoneFeed
import ZoneFeedPostgres

/// Every commit empties every staging table of its session (`ON COMMIT DELETE ROWS`), about
/// 0.35 ms each: a session made one for each mapped record type, so a pipeline of a hundred
/// types paid 35 ms a batch for the few types its records had. A session now makes a type's
/// staging table when it first stages rows of that type.
@Suite struct StagingTablesTests {
    @Test func aSessionMakesStagingTablesOnlyForTheRecordTypesItStages() async throws {
        // A database of its own: temporary tables are seen in pg_class of their database only,
        // so those counted are this run's.
        let server = try await TestDatabase.connectionString()
        let database = TestDatabase.uniqueName("staging")
        _ = try await Connection.withConnectionOffPool(server) { c in try c.execute("CREATE DATABASE \(quoteIdentifier(database))") }
        var p = try await FakePipeline(prefix: "staging", fake: FakeSettings(seed: 12, zones: 1, recordsPerZone: 300))
        p.url = server + " dbname=\(database)"
        // The fake's three types, and twenty the feed never brings.
        let unseen = (0..<20).map { "  Unseen\($0):\n    table: unseen_\($0)\n" }.joined()
        p.recordTypesSection = "recordTypes:\n  Note:\n    table: notes\n  Folder:\n    table: folders\n  Tag:\n    table: tags\n" + unseen
        // The first run copies its rows straight into the tables, staging none.
        #expect(try await p.run().status == .succeeded)

        // The second meets rows already there, and merges its batches through staging tables.
        p.fake.recordsPerZone = 600
        let url = p.url
        let seen = Mutex<[[String]]>([])
        let summary = try await p.run(events: { event in
            guard case .fetchedRecordZoneChanges = event else { return }
            // Off the tasks' threads: libpq blocks.
            let tables = try? await Connection.withConnectionOffPool(url) { c in
                try c.query("SELECT relname FROM pg_class WHERE relpersistence = 't' AND relkind = 'r' ORDER BY relname").rows.map {
                    try $0.decode(0, as: String.self)
                }
            }
            seen.withLock { $0.append(tables ?? ["(could not look)"]) }
        })
        #expect(summary.status == .succeeded)
        #expect(summary.totals.upserts > 0)
        #expect(try await DestinationSnapshot.read(p).differences(from: p.expected()) == [])

        let looks = seen.withLock { $0 }
        #expect(!looks.isEmpty)
        for tables in looks {
            let staging = tables.filter { $0.hasPrefix("zf_stage_") }
            // The three types are the first three mapped: zf_stage_0 to zf_stage_2, on each of
            // the run's sessions that staged them.
            #expect(!staging.isEmpty && Set(staging).isSubset(of: ["zf_stage_0", "zf_stage_1", "zf_stage_2"]), "\(tables)")
            #expect(Set(tables).isSuperset(of: ["zf_deletes", "zf_listed"]), "\(tables)")
        }
        _ = try await Connection.withConnectionOffPool(server) { c in try c.execute("DROP DATABASE \(quoteIdentifier(database)) WITH (FORCE)") }
    }
}
