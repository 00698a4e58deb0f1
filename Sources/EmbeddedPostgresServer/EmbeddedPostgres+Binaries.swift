import Foundation
import Logging

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

extension EmbeddedPostgres {
    struct Binaries: Sendable {
        var directory: String
        var initdb: String { directory + "/initdb" }
        var pgCtl: String { directory + "/pg_ctl" }
        /// psql sits beside initdb in every layout we know (Debian's /usr/lib/postgresql/N/bin, Homebrew,
        /// the PGDG RPMs); PATH is the fallback for a hand-made bin folder with the server programs only.
        var psql: String {
            let beside = directory + "/psql"
            if FileManager.default.isExecutableFile(atPath: beside) { return beside }
            return searchPath(for: "psql") ?? beside
        }

        /// `explicit`, else `ZONEFEED_PG_BINDIR`, else the version an existing cluster needs from
        /// /usr/lib/postgresql, else `pg_config --bindir`, else the highest
        /// /usr/lib/postgresql/*/bin, else PATH.
        static func locate(preferredMajorVersion: String?, explicit: String? = nil, logger: Logger) async throws -> Binaries {
            if let explicit = explicit ?? ProcessInfo.processInfo.environment["ZONEFEED_PG_BINDIR"], !explicit.isEmpty {
                guard hasServerPrograms(explicit) else {
                    throw EmbeddedPostgresError(
                        .binariesNotFound,
                        "ZONEFEED_PG_BINDIR is \(explicit), which has no initdb and pg_ctl: point it at the bin folder "
                            + "of a PostgreSQL server installation, or unset it"
                    )
                }
                return Binaries(directory: EmbeddedPostgres.absolutePath(explicit))
            }
            if let preferredMajorVersion, hasServerPrograms("/usr/lib/postgresql/\(preferredMajorVersion)/bin") {
                return Binaries(directory: "/usr/lib/postgresql/\(preferredMajorVersion)/bin")
            }
            if let pgConfig = searchPath(for: "pg_config"),
                let bindir = try? await CommandRunner(account: nil, workingDirectory: "/", logger: logger).run(pgConfig, ["--bindir"]),
                bindir.status == 0
            {
                let directory = bindir.output.trimmingCharacters(in: .whitespacesAndNewlines)
                if hasServerPrograms(directory) { return Binaries(directory: directory) }
            }
            let debianRoot = "/usr/lib/postgresql"
            let versions = ((try? FileManager.default.contentsOfDirectory(atPath: debianRoot)) ?? [])
                .filter { hasServerPrograms("\(debianRoot)/\($0)/bin") }
                .sorted { $0.compare($1, options: .numeric) == .orderedAscending }
            if let highest = versions.last {
                return Binaries(directory: "\(debianRoot)/\(highest)/bin")
            }
            if let initdb = searchPath(for: "initdb") {
                let directory = (EmbeddedPostgres.realPath(initdb) as NSString).deletingLastPathComponent
                if hasServerPrograms(directory) { return Binaries(directory: directory) }
                let unresolved = (initdb as NSString).deletingLastPathComponent
                if hasServerPrograms(unresolved) { return Binaries(directory: unresolved) }
            }
            throw EmbeddedPostgresError(
                .binariesNotFound,
                "the embedded database needs the PostgreSQL server programs (initdb, pg_ctl), and none were found: install "
                    + "the server (Debian/Ubuntu: apt-get install -y postgresql; macOS: brew install postgresql@16), or set "
                    + "ZONEFEED_PG_BINDIR to its bin folder"
            )
        }

        static func hasServerPrograms(_ directory: String) -> Bool {
            FileManager.default.isExecutableFile(atPath: directory + "/initdb")
                && FileManager.default.isExecutableFile(atPath: directory + "/pg_ctl")
        }

        /// The major version of these binaries, from `pg_ctl --version` ("pg_ctl (PostgreSQL) 15.18 …").
        func majorVersion(runner: CommandRunner) async throws -> String? {
            let result = try await runner.run(pgCtl, ["--version"])
            guard result.status == 0, let range = result.output.range(of: "(PostgreSQL) ") else { return nil }
            let version = result.output[range.upperBound...].prefix { $0.isNumber || $0 == "." }
            let parts = version.split(separator: ".")
            guard let first = parts.first else { return nil }
            // Before PostgreSQL 10 the major version had two parts (9.6).
            if first == "9", parts.count > 1 { return "9.\(parts[1])" }
            return String(first)
        }
    }
}

func searchPath(for program: String) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
    for directory in path.split(separator: ":") where !directory.isEmpty {
        let candidate = "\(directory)/\(program)"
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
    }
    return nil
}
