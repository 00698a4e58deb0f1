import Foundation
import Logging
import Testing

@testable import EmbeddedPostgresServer

/// The server's programs get exactly the environment `childEnvironment()` describes: this
/// process's variables without PG*, and LC_ALL=C. Given as raw "K=V" byte rows, swift-subprocess
/// passed each to strdup, which read past its end: a database name reached libpq as
/// "zonefeed" followed by whatever bytes came next.
@Test func aServerProgramGetsExactlyTheChildEnvironment() async throws {
    let runner = EmbeddedPostgres.CommandRunner(account: nil, workingDirectory: "/", logger: Logger(label: "command-runner-test"))
    let result = try await runner.run("/usr/bin/env", [])
    #expect(result.status == 0)
    let lines = result.output.split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
    let expected = childEnvironment().filter { !$0.value.contains("\n") }.map { "\($0.key)=\($0.value)" }
    #expect(Set(lines).isSuperset(of: Set(expected)), "missing: \(Set(expected).subtracting(lines).sorted())")
    #expect(lines.count == childEnvironment().values.reduce(0) { $0 + 1 + $1.count { $0 == "\n" } })
    #expect(lines.contains("LC_ALL=C"))
    #expect(!lines.contains { $0.hasPrefix("PG") })
}
