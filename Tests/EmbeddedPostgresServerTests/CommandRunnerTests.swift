import Foundation
import Logging
import Testing

@testable import EmbeddedPostgresServer

/// The server's programs get exactly the environment `childEnvironment()` describes: PATH, LANG,
/// LC_*, TZ and TMPDIR from this process (none of its secrets, no PG*), and LC_ALL=C. Given as raw
/// "K=V" byte rows, swift-subprocess passed each to strdup, which read past its end: a database
/// name reached libpq as "zonefeed" followed by whatever bytes came next.
@Test func aServerProgramGetsExactlyTheChildEnvironment() async throws {
    let probe = secretProbe
    let runner = EmbeddedPostgres.CommandRunner(account: nil, workingDirectory: "/", logger: Logger(label: "command-runner-test"))
    let result = try await runner.run("/usr/bin/env", [])
    #expect(result.status == 0)
    let lines = result.output.split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
    let expected = childEnvironment().filter { !$0.value.contains("\n") }.map { "\($0.key)=\($0.value)" }
    #expect(Set(lines).isSuperset(of: Set(expected)), "missing: \(Set(expected).subtracting(lines).sorted())")
    #expect(lines.count == childEnvironment().values.reduce(0) { $0 + 1 + $1.count { $0 == "\n" } })
    #expect(lines.contains("LC_ALL=C"))
    #expect(!lines.contains { $0.hasPrefix("PG") })
    #expect(!lines.contains { $0.contains(probe.value) })
    #expect(lines.contains { $0.hasPrefix("PATH=") })
    let allowed: Set = ["PATH", "LANG", "TZ", "TMPDIR"]
    #expect(childEnvironment().keys.filter { !allowed.contains($0) && !$0.hasPrefix("LC_") }.sorted() == [])
}

/// `postmaster.pid` is the server account's to write and zonefeed's to read, as root too: a
/// first line that names no single process is no PID, where `Int32.min` trapped and 0 would
/// have named zonefeed's own process group to `kill`.
@Test(arguments: [("-2147483648", nil), ("0", nil), ("-123", 123), ("4321", 4321), ("x", nil)] as [(String, Int32?)])
func aPIDFileIsReadForItsPIDOnlyWhenItNamesOneProcess(_ first: String, _ expected: Int32?) throws {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("zonefeed-pidfile-\(UUID().uuidString)").path
    defer { try? FileManager.default.removeItem(atPath: path) }
    try "\(first)\n/data\n1700000000\n5432\n/sock\n\n\nready\n".write(toFile: path, atomically: true, encoding: .utf8)
    let read = EmbeddedPostgres.PIDFile.read(path)
    #expect(read?.pid == expected)
    if expected != nil { #expect(read?.port == 5432 && read?.status == "ready") }
}
