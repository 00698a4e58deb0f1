import FakeCloudKit
import LibPQ
import TestSupport
import Testing
import ZoneFeedPostgres

/// A destination database encoded other than in UTF-8 is refused before anything is written:
/// a record holding a character its encoding cannot hold (an emoji in LATIN1) failed its batch
/// in every run, for every zone, where no reject could keep it. So did, in a SQL_ASCII database,
/// a record whose JSON spelled such a character with an escape (`"caf\u00e9"`): its jsonb
/// refuses the escape, and a record's fields are copied into jsonb as they were written.
@Suite struct DatabaseEncodingTests {
    @Test(arguments: ["LATIN1", "SQL_ASCII"])
    func aDatabaseNotEncodedInUTF8IsRefusedBeforeAnythingIsWritten(encoding: String) async throws {
        let server = try await TestDatabase.connectionString()
        let name = TestDatabase.uniqueName("encoded")
        _ = try await Connection.withConnectionOffPool(server) { c in
            try c.execute("CREATE DATABASE \(quoteIdentifier(name)) ENCODING '\(encoding)' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
        }
        if encoding == "SQL_ASCII" {
            // What would meet every run of such a database: jsonb of an escape past ASCII.
            let refused = try await Connection.withConnectionOffPool(server + " dbname=\(name)") { c -> String? in
                do {
                    _ = try c.query(#"SELECT '{"t":"caf\u00e9"}'::jsonb"#)
                    return nil
                } catch let error as PostgresError {
                    return error.sqlState
                }
            }
            #expect(refused == "0A000", "unsupported Unicode escape sequence")
        }
        var p = try await FakePipeline(prefix: "encoded", fake: FakeSettings(seed: 1, zones: 1, recordsPerZone: 1))
        p.url = server + " dbname=\(name)"
        let destination = try p.destination()
        let error = await #expect(throws: DestinationEncodingError.self) { try await destination.prepare() }
        await destination.close()
        #expect(
            error?.description.hasPrefix("database \(name) is encoded in \(encoding), and CloudKit's text is Unicode") == true,
            "\(String(describing: error))")
        let schema = p.schema
        let tables = try await Connection.withConnectionOffPool(p.url) { c in
            try c.query("SELECT count(*) FROM information_schema.tables WHERE table_schema = $1", [schema]).scalar
        }
        #expect(tables == "0", "nothing was made")
        _ = try await Connection.withConnectionOffPool(server) { c in try c.execute("DROP DATABASE \(quoteIdentifier(name))") }
    }
}
