import Foundation
import TestSupport
import Testing

@Suite struct ValidateCommandTests {
    /// `zonefeed validate` on PRODUCT.md's example: the plan a person reads before a first run,
    /// with every token and password hidden.
    @Test func validatePrintsThePlanButNoSecret() throws {
        let zonefeed = try ZonefeedBinary(environment: PipelineExamples.productEnvironment)
        defer { zonefeed.remove() }
        let file = zonefeed.directory.appendingPathComponent("notes.yml")
        try PipelineExamples.product.write(to: file, atomically: true, encoding: .utf8)

        let output = try zonefeed.run(["validate", file.path])
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
}
