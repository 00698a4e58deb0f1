import FakeCloudKit
import LibPQ
import TestSupport
import Testing
import ZoneFeedPostgres

/// A destination database encoded other than in UTF-8 is refused before anything is written:
/// a record holding a character its encoding cannot hold (an emoji in LATIN1) failed its batch
/// in every run, for every zone, where no reject could keep it.
@Suite struct DatabaseEncodingTests {
    @Test func aDatabaseNotEncodedInUTF8IsRefusedBeforeAnythingIsWritten() async throws {
        let server = try await TestDatabase.connectionString()
        let name = TestDatabase.uniqueName("latin")
        _ = try await Connection.withConnectionOffPool(server) { c in
            try c.execute("CREATE DATABASE \(quoteIdentifier(name)) ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
        }
        var p = try await FakePipeline(prefix: "latin", fake: FakeSettings(seed: 1, zones: 1, recordsPerZone: 1))
        p.url = server + " dbname=\(name)"
        let destination = try p.destination()
        let error = await #expect(throws: DestinationEncodingError.self) { try await destination.prepare() }
        await destination.close()
        #expect(error?.description.hasPrefix("database \(name) is encoded in LATIN1, and CloudKit's text is Unicode") == true, "\(String(describing: error))")
        let schema = p.schema
        let tables = try await Connection.withConnectionOffPool(p.url) { c in
            try c.query("SELECT count(*) FROM information_schema.tables WHERE table_schema = $1", [schema]).scalar
        }
        #expect(tables == "0", "nothing was made")
        _ = try await Connection.withConnectionOffPool(server) { c in try c.execute("DROP DATABASE \(quoteIdentifier(name))") }
    }
}
