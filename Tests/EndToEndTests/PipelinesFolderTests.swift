import Foundation
import TestSupport
import Testing
import ZoneFeed

/// The examples are part of the product: every file in pipelines/ validates, and the demo runs.
@Suite struct PipelinesFolderTests {
    static var repository: URL {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url
    }

    static var pipelineFiles: [String] {
        let folder = repository.appendingPathComponent("pipelines")
        return ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? [])
            .filter { $0.hasSuffix(".yml") }.sorted().map { folder.appendingPathComponent($0).path }
    }

    @Test func thereArePipelineExamples() {
        #expect(Self.pipelineFiles.contains { $0.hasSuffix("demo.yml") })
    }

    @Test(arguments: pipelineFiles)
    func everyPipelineFileValidates(file: String) async throws {
        // Example files read their secrets from the environment; any value will do to validate.
        let zonefeed = try ZonefeedBinary(environment: [
            "CLOUDKIT_API_TOKEN": "example-api-token", "CLOUDKIT_WEB_AUTH_TOKEN": "example-web-auth-token",
            "DATABASE_URL": "postgresql://example@localhost/example",
        ])
        defer { zonefeed.remove() }
        let output = try await zonefeed.run(["validate", file])
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stdout.contains("CREATE TABLE IF NOT EXISTS"))
        #expect(!output.stdout.contains("example-api-token") && !output.stdout.contains("example-web-auth-token"))
    }

    /// The newcomer's first command: the demo, fake source into embedded PostgreSQL, twice.
    @Test func theDemoRunsEndToEndAndASecondRunHasNothingNew() async throws {
        let zonefeed = try ZonefeedBinary()
        defer { zonefeed.remove() }
        let demo = Self.repository.appendingPathComponent("pipelines/demo.yml").path

        let first = try await zonefeed.run(["run", demo, "--progress", "never"])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(first.stdout.contains("succeeded"))
        #expect(first.stdout.contains("zonefeed psql"), "the summary says how to query the result")
        // The hint runs as printed: here zonefeed was started by its path, which is not on PATH.
        let hint = try #require(first.stdout.split(separator: "\n").first { $0.hasPrefix("Query it:") })
        let command = String(hint.dropFirst("Query it:".count)).trimmingCharacters(in: .whitespaces)
        #expect(command.hasPrefix(ZonefeedBinary.path + " psql "), "\(command)")
        let queried = try await zonefeed.shell(command)
        #expect(queried.status == 0, "\(queried.stderr)")
        #expect(queried.stdout.contains("count"))

        let second = try await zonefeed.run(["run", demo, "--progress", "never"])
        #expect(second.status == 0)
        #expect(second.stdout.contains("nothing new"))

        let count = try await zonefeed.run(["psql", demo, "-At", "-c", "SELECT count(*) FROM demo.notes_live"])
        #expect(count.status == 0, "\(count.stderr)")
        #expect((Int(count.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0) > 1_000)
        #expect(FileManager.default.fileExists(atPath: zonefeed.directory.appendingPathComponent(".zonefeed/postgres/data").path))
    }

    /// A clone in a folder of mode 0700, the demo run from there. As root (CI), that is /root,
    /// which the server's account cannot pass: the cluster lives under /var/lib/zonefeed instead,
    /// and `validate` (before any run), the run and `status` say where, and how to remove it. As
    /// anyone else the server runs as that user, who can: the cluster stays in the folder.
    @Test func theDemoRunsFromAPrivateFolderAndStatusSaysWhereItsClusterIs() async throws {
        let asRoot = geteuid() == 0
        let zonefeed = try ZonefeedBinary(parent: asRoot ? "/root" : NSTemporaryDirectory())
        defer { zonefeed.remove() }
        #expect(chmod(zonefeed.directory.path, 0o700) == 0)
        let demo = zonefeed.directory.appendingPathComponent("demo.yml").path
        try FileManager.default.copyItem(atPath: Self.repository.appendingPathComponent("pipelines/demo.yml").path, toPath: demo)

        let validate = try await zonefeed.run(["validate", "demo.yml"])
        let run = try await zonefeed.run(["run", "demo.yml", "--progress", "never"])
        #expect(run.status == 0, "\(run.stderr)")
        let status = try await zonefeed.run(["status", "demo.yml"])
        let line = status.stdout.split(separator: "\n").first { $0.hasPrefix("embedded PostgreSQL cluster: ") }
        let cluster = line.map { String($0.dropFirst("embedded PostgreSQL cluster: ".count)) } ?? ""
        #expect(FileManager.default.fileExists(atPath: cluster + "/data"), "\(status.stdout)")
        #expect(status.stdout.contains("to remove it, with no zonefeed command using it: rm -rf '\(cluster)'"), "\(status.stdout)")
        #expect(validate.stdout.contains("url:                embedded: a private cluster in \(cluster)"), "\(validate.stdout)")
        #expect(validate.stdout.contains("to remove it, with no zonefeed command using it: rm -rf '\(cluster)'"), "\(validate.stdout)")
        if asRoot {
            #expect(run.stderr.contains("cannot reach"), "the log says where the cluster lives: \(run.stderr)")
            #expect(run.stderr.contains("rm -rf '\(cluster)'"), "the log says how to remove it: \(run.stderr)")
            #expect(cluster.hasPrefix("/var/lib/zonefeed/"), "\(status.stdout)")
            #expect(validate.stdout.contains("which cannot reach \(zonefeed.directory.path)/.zonefeed/postgres"), "\(validate.stdout)")
            if cluster.hasPrefix("/var/lib/zonefeed/") { try? FileManager.default.removeItem(atPath: cluster) }
        } else {
            let asked = zonefeed.directory.appendingPathComponent(".zonefeed/postgres").standardizedFileURL.path
            #expect(URL(fileURLWithPath: cluster).standardizedFileURL.path == asked, "\(status.stdout)")
        }
    }
}
