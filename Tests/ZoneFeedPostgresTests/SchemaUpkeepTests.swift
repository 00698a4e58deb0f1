import FakeCloudKit
import Foundation
import LibPQ
import TestSupport
import Testing
import ZoneFeed

/// Each run makes sure the destination's tables are as the pipeline file says, and changes them
/// only when they are not: changing a table locks it against every reader.
@Suite struct SchemaUpkeepTests {
    @Test func aRunDoesNotWaitForReadersOfItsTables() async throws {
        var p = try await FakePipeline(prefix: "readers", fake: FakeSettings(seed: 4, zones: 2, recordsPerZone: 500))
        try await p.run()
        let reader = try Connection(p.url)
        defer { reader.close() }
        let schema = quoteIdentifier(p.schema)
        // An analyst's long transaction holds its tables until it ends.
        try reader.execute("BEGIN")
        try reader.query("SELECT count(*) FROM \(schema).notes_live")
        try reader.query("SELECT count(*) FROM \(schema).folders")

        p.fake.recordsPerZone = 800
        let pipeline = p
        let finished = try await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask { try await pipeline.run().status == .succeeded }
            group.addTask {
                try await Task.sleep(for: .seconds(120))  // a stuck run waits for ever; a loaded one, tens of seconds
                return false
            }
            let first = try await group.next()!
            // A run stuck behind the reader is let go, so that the test ends either way.
            try reader.execute("COMMIT")
            group.cancelAll()
            return first
        }
        #expect(finished, "the run finished while a reader held the tables")
        #expect(try await DestinationSnapshot.read(p).differences(from: p.expected()) == [])
    }

    @Test func aTableMadeByAnOlderMappingIsBroughtUpToDate() async throws {
        let p = try await FakePipeline(prefix: "upkeep", fake: FakeSettings(seed: 5, zones: 1, recordsPerZone: 400))
        try await p.run()
        let schema = quoteIdentifier(p.schema)
        // As an older zonefeed or mapping left it: no body column, no synced_at default, no view.
        try Connection.withConnection(p.url) { c in
            try c.execute("DROP VIEW \(schema).notes_live")
            try c.execute("ALTER TABLE \(schema).notes DROP COLUMN body, ALTER COLUMN synced_at DROP DEFAULT")
        }
        try await p.reset(all: true)
        let again = try await p.run()

        #expect(again.status == .succeeded)
        let (bodies, syncedAtDefault) = try Connection.withConnection(p.url) { c in
            (
                try c.query("SELECT count(*) FROM \(schema).notes_live WHERE body IS NOT NULL").scalar,
                try c.query(
                    """
                    SELECT column_default FROM information_schema.columns
                    WHERE table_schema = $1 AND table_name = 'notes' AND column_name = 'synced_at'
                    """, [p.schema]
                ).scalar
            )
        }
        #expect(bodies != "0", "the column is back, filled, and in the view")
        #expect(syncedAtDefault == "now()")
        #expect(try await DestinationSnapshot.read(p).differences(from: p.expected()) == [])
    }
}
