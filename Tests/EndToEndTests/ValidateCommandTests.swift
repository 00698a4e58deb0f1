import Foundation
import TestSupport
import Testing

@Suite struct ValidateCommandTests {
    /// `zonefeed validate` on PRODUCT.md's example: the plan a person reads before a first run,
    /// with every token and password hidden.
    @Test func validatePrintsThePlanButNoSecret() async throws {
        let zonefeed = try ZonefeedBinary(environment: PipelineExamples.productEnvironment)
        defer { zonefeed.remove() }
        let file = zonefeed.directory.appendingPathComponent("notes.yml")
        try PipelineExamples.product.write(to: file, atomically: true, encoding: .utf8)

        let output = try await zonefeed.run(["validate", file.path])
        #expect(output.status == 0, "\(output.stderr)")
        let plan = output.stdout
        for secret in ["ck-api-token-SECRET-1", "ck-web-auth-SECRET-2", "pg-password-SECRET-3"] {
            #expect(!plan.contains(secret) && !output.stderr.contains(secret))
        }
        for line in [
            "  container:          iCloud.com.example.notes",
            "  zones:              all (discovered through the database change feed)",
            "  auth:               apiToken <redacted>, webAuthToken <redacted>, webAuthTokenFile .zonefeed/notes.web-auth-token",
            "  url:                postgresql://zonefeed:<redacted>@db.internal:5432/app?sslmode=require",
            "  Note -> table notes.notes, view notes.notes_live (its rows whose deleted_at is null)",
            "    title       text",
            "    word_count  bigint  (field wordCount)",
            "    body_text   text    (field body)",
            "    fields      jsonb   (the fields not mapped to a column)",
            "  onBadRecord:        reject (to zonefeed_rejects; the run goes on)",
        ] {
            #expect(plan.split(separator: "\n").contains(Substring(line)), "missing line: \(line)\n\(plan)")
        }
    }

    /// `desiredKeys` that leaves out a mapped field would leave its column empty for good (each
    /// upsert writes the whole row): refused where it is written, naming the fields. It was
    /// accepted, and the docs' own example did it.
    @Test func desiredKeysThatLeaveOutAMappedFieldAreRefusedAtTheirLine() async throws {
        let zonefeed = try ZonefeedBinary(environment: PipelineExamples.productEnvironment)
        defer { zonefeed.remove() }
        let file = zonefeed.directory.appendingPathComponent("notes.yml")
        let narrowed = PipelineExamples.product.replacingOccurrences(
            of: "    resultsLimit: 200\n", with: "    resultsLimit: 200\n    desiredKeys: [title, body]\n")
        try narrowed.write(to: file, atomically: true, encoding: .utf8)
        let refused = try await zonefeed.run(["validate", file.path])
        #expect(refused.status == 2)
        #expect(
            refused.stderr.contains(
                "notes.yml:10:18: source.cloudkit.desiredKeys leaves out Note.wordCount, which recordTypes maps to columns: they would stay empty"),
            "\(refused.stderr)")

        try PipelineExamples.product.replacingOccurrences(
            of: "    resultsLimit: 200\n", with: "    resultsLimit: 200\n    desiredKeys: [title, body, wordCount, extra]\n"
        )
        .write(to: file, atomically: true, encoding: .utf8)
        let accepted = try await zonefeed.run(["validate", file.path])
        #expect(accepted.status == 0, "\(accepted.stderr)")
    }

    /// `zonefeed validate` of a pipeline of the fake source into the embedded database, with
    /// `sections` after its destination.
    static func validate(_ pipeline: String, with sections: String) async throws -> ZonefeedBinary.Output {
        let zonefeed = try ZonefeedBinary()
        defer { zonefeed.remove() }
        let file = zonefeed.directory.appendingPathComponent("\(pipeline).yml")
        try """
        pipeline: \(pipeline)
        source:
          fake: {}
        destination:
          url: embedded

        """.appending(sections).write(to: file, atomically: true, encoding: .utf8)
        return try await zonefeed.run(["validate", file.path])
    }

    /// The metrics section is part of the plan, with a Pushgateway's password hidden.
    @Test func validateSaysWhereMetricsGoWithoutAGatewaysPassword() async throws {
        let output = try await Self.validate(
            "metered",
            with: """
                metrics:
                  file: /var/lib/node_exporter/textfile/metered.prom
                  pushgateway: https://ops:gateway-SECRET-4@pushgateway.example:9091
                  instance: shard-0
                """)
        #expect(output.status == 0, "\(output.stderr)")
        #expect(!output.stdout.contains("gateway-SECRET-4"))
        #expect(output.stdout.contains("file:               /var/lib/node_exporter/textfile/metered.prom"), "\(output.stdout)")
        #expect(
            output.stdout.contains("pushgateway:        https://pushgateway.example:9091 as job=\"zonefeed\", pipeline=\"metered\", instance=\"shard-0\""),
            "the group the metrics go to, instance and all: \(output.stdout)")
    }

    /// The watch section is part of the plan, so that a person sees how often the safety poll
    /// runs and where the probes are served before deploying `zonefeed watch`.
    @Test func validateSaysHowWatchPollsAndWhereItListens() async throws {
        let output = try await Self.validate(
            "watched",
            with: """
                watch:
                  pollInterval: 90
                  listen: 0.0.0.0:9464
                  unhealthyAfter: 1800.5
                """)
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stdout.contains("watch (for zonefeed watch; its --poll-interval and --listen win):"), "\(output.stdout)")
        #expect(output.stdout.contains("poll interval:      every 90 s, whatever the notifications say"), "\(output.stdout)")
        #expect(output.stdout.contains("listen:             0.0.0.0:9464 (/healthz and /metrics)"), "\(output.stdout)")
        #expect(output.stdout.contains("unhealthy after:    1800.5 s of failing cycles"), "\(output.stdout)")

        let plain = try await Self.validate("unwatched", with: "")
        #expect(plain.status == 0, "\(plain.stderr)")
        #expect(!plain.stdout.contains("watch ("), "no section, no plan for it: \(plain.stdout)")
    }
}
