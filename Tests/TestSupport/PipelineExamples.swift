/// Pipeline files that several test targets read.
public enum PipelineExamples {
    /// The example from PRODUCT.md, verbatim.
    public static let product = """
        pipeline: notes                       # name; the key of its checkpoints
        source:
          cloudkit:                           # exactly one of cloudkit | fake
            baseURL: https://api.apple-cloudkit.com   # default; a fake server's URL in tests
            container: iCloud.com.example.notes
            environment: production           # development | production
            database: private                 # private | shared
            zones: all                        # all | [ZoneA, ZoneB]
            resultsLimit: 200
            auth:
              apiToken: ${CLOUDKIT_API_TOKEN}             # ${VAR} reads the environment
              webAuthToken: ${CLOUDKIT_WEB_AUTH_TOKEN}
              webAuthTokenFile: .zonefeed/notes.web-auth-token
          # fake: { seed: 42, zones: 3, recordsPerZone: 10000 }
        destination:
          url: ${DATABASE_URL}                # or: embedded
          schema: notes
          deletes: tombstone                  # tombstone | hard
          commitEvery: 5000                   # records per transaction, whole pages only
        recordTypes:
          Note:
            table: notes
            fields:
              title: text                     # column title
              wordCount: bigint               # column word_count (snake_case by default)
              body: { column: body_text, type: text }
          Folder:
            table: folders                    # no fields: everything goes to the fields jsonb column
        unmappedFields: keep                  # keep | drop
        unknownRecordTypes: skip              # skip | reject
        onBadRecord: reject                   # reject (to zonefeed_rejects, run goes on) | fail
        """

    public static let productEnvironment = [
        "CLOUDKIT_API_TOKEN": "ck-api-token-SECRET-1",
        "CLOUDKIT_WEB_AUTH_TOKEN": "ck-web-auth-SECRET-2",
        "DATABASE_URL": "postgresql://zonefeed:pg-password-SECRET-3@db.internal:5432/app?sslmode=require",
    ]
}
