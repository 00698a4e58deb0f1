import FakeCloudKit
import TestSupport
import Testing
import ZoneFeed
import ZoneFeedComponents
import ZoneFeedPostgres

/// A program that writes to two kinds of destination: the key under `destination:` chooses one,
/// as the key under `source:` chooses the source.
@Suite struct DestinationChoiceTests {
    static let components = PipelineComponents(sources: [FakeSettings.self], destinations: [PostgresSettings.self, MemoryDestinationSettings.self])

    static func read(_ yaml: String) -> Result<Pipeline, PipelineFileError> {
        Result { try Pipeline.parse(yaml: yaml, filePath: "notes.yml", components: components, environment: [:]) }
            .mapError { $0 as! PipelineFileError }
    }

    @Test func theKeyUnderDestinationChoosesIt() throws {
        let memory = try Self.read("pipeline: notes\nsource:\n  fake: {}\ndestination:\n  memory: notes\n").get()
        #expect((memory.destination as? MemoryDestinationSettings)?.name == "notes")
        let postgres = try Self.read("pipeline: notes\nsource:\n  fake: {}\ndestination:\n  url: embedded\n  schema: notes\n").get()
        #expect((postgres.destination as? PostgresSettings)?.isEmbedded == true)
    }

    @Test func aDestinationWithTwoKindsKeysIsRefusedAtTheSecond() {
        let both = Self.read("pipeline: notes\nsource:\n  fake: {}\ndestination:\n  url: embedded\n  memory: notes\n")
        guard case .failure(let error) = both else {
            Issue.record("a file naming two destinations was accepted")
            return
        }
        #expect(
            error.diagnostics.map(\.description) == [
                "notes.yml:6:3: destination has both 'url' and 'memory': a pipeline writes to exactly one destination"
            ])
    }

    /// Neither key: the first destination the program knows reads it and says what it misses.
    @Test func aDestinationWithNeitherKeyIsReportedByTheFirst() {
        guard case .failure(let error) = Self.read("pipeline: notes\nsource:\n  fake: {}\ndestination:\n  schema: notes\n") else {
            Issue.record("a destination with neither key was accepted")
            return
        }
        #expect(error.diagnostics.map(\.description).contains { $0.hasPrefix("notes.yml:4:1: ") && $0.contains("url") }, "\(error.diagnostics)")
    }
}
