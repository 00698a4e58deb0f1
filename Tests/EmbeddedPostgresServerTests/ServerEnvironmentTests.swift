import Foundation
import Logging
import Testing

@testable import EmbeddedPostgresServer

/// A secret in this process's environment, as CLOUDKIT_WEB_AUTH_TOKEN or DATABASE_URL would be.
/// Set once, by a global's initializer (run once, under a lock): setenv while other tests read the
/// environment would race with them.
let secretProbe: (name: String, value: String) = {
    let probe = (name: "ZONEFEED_SECRET_PROBE", value: "probe-\(UInt64.random(in: 0...UInt64.max))")
    setenv(probe.name, probe.value, 1)
    return probe
}()

/// As root the postmaster runs for hours as the server's account, and any process of that account
/// can read its environment in /proc/<pid>/environ; as a user, any process of that user can. It
/// inherited all of this process's variables but PG*: the CloudKit tokens and database URL of the
/// run that started it. It now gets the allowlisted ones only.
/// (It reads /proc, which every machine the project runs on has: Linux, as `.ci/run` checks.)
@Test func thePostmasterInheritsNoneOfThisProcesssSecrets() async throws {
    let probe = secretProbe
    #expect(ProcessInfo.processInfo.environment[probe.name] == probe.value)
    let folder = try makeTemporaryFolder()
    defer { try? FileManager.default.removeItem(atPath: folder) }
    let embedded = EmbeddedPostgres(EmbeddedPostgres.Configuration(directory: folder, extraServerSettings: ["fsync": "off"]))

    let environment = try await embedded.withServer { _ in
        let postmaster = try #require(EmbeddedPostgres.PIDFile.read(embedded.postmasterPIDFile))
        return try processEnvironment(postmaster.pid)
    }

    #expect(environment[probe.name] == nil)
    #expect(!environment.values.contains { $0.contains(probe.value) })
    #expect(environment["PATH"] != nil)
    #expect(environment["LC_ALL"] == "C")
}

/// A process's environment as Linux shows it: NUL-terminated `NAME=value` entries.
func processEnvironment(_ pid: Int32) throws -> [String: String] {
    let file = try #require(FileHandle(forReadingAtPath: "/proc/\(pid)/environ"))
    defer { try? file.close() }
    let bytes = try file.readToEnd() ?? Data()
    var environment: [String: String] = [:]
    for entry in bytes.split(separator: 0) {
        let text = String(decoding: entry, as: UTF8.self)
        guard let equals = text.firstIndex(of: "=") else { continue }
        environment[String(text[..<equals])] = String(text[text.index(after: equals)...])
    }
    return environment
}
