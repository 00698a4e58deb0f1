import FakeCloudKit
import Foundation
import LibPQ
import TestSupport
import Testing
import ZoneFeed
import ZoneFeedPostgres

/// `zonefeed status` as the destination reads it: each zone's rows are counted as its own.
@Suite struct PipelineStatusTests {
    /// Owner `a/b` with zone `c` and owner `a` with zone `b/c` are two zones: each is shown with
    /// its own rows, where both were shown with the sum of the two.
    @Test func zonesWhoseOwnerAndNameJoinAlikeAreCountedApart() async throws {
        let p = try await FakePipeline(prefix: "statuscount", fake: FakeSettings(seed: 8, zones: 1, recordsPerZone: 10))
        try await p.run()
        let schema = quoteIdentifier(p.schema)
        try Connection.withConnection(p.url) { c in
            for (owner, zone, rows) in [("a/b", "c", 2), ("a", "b/c", 1)] {
                try c.query(
                    "INSERT INTO \(schema).zonefeed_checkpoints (pipeline, scope, zone_owner, zone_name) VALUES ($1, 'zone', $2, $3)", [p.name, owner, zone])
                for i in 0..<rows {
                    try c.query(
                        "INSERT INTO \(schema).tags (zone_owner, zone_name, record_name, record_type, run_id, generation) VALUES ($1, $2, $3, 'Tag', 1, 1)",
                        [owner, zone, "r\(i)"])
                }
            }
        }
        let destination = try p.destination()
        try await destination.prepare()
        let status = try await destination.status()
        await destination.close()
        let counts = Dictionary(uniqueKeysWithValues: status.zones.map { ("\($0.zoneOwner)|\($0.zoneName)", $0.liveRows) })
        #expect(counts["a/b|c"] == 2 && counts["a|b/c"] == 1, "\(counts)")
    }
}
