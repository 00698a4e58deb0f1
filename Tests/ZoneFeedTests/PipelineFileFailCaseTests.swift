import Foundation
import TestSupport
import Testing
import ZoneFeed
import ZoneFeedComponents

/// Every pipeline file that once broke FuzzPipelineFile (FuzzTesting/FailCases/FuzzPipelineFile/),
/// read again as the target reads it: each must end in a pipeline or in diagnostics, quickly.
@Suite struct PipelineFileFailCaseTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../..").standardized
    static let failCases = repository.appendingPathComponent("FuzzTesting/FailCases/FuzzPipelineFile")

    static var names: [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: failCases.path)) ?? []).filter { !$0.hasPrefix(".") }.sorted()
    }

    /// The target's variables and folder: the schema files the corpus names beside the file.
    static let environment = [
        "CLOUDKIT_API_TOKEN": "ck-api-token", "CLOUDKIT_WEB_AUTH_TOKEN": "ck-web-auth-token", "DATABASE_URL": "postgresql://etl@db.internal/analytics",
        "FAKE_CLOUDKIT_URL": "http://127.0.0.1:8765", "EMPTY": "",
    ]

    static func folder() throws -> URL {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("zonefeed-failcase-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        for (from, to) in [("pipelines/cloudkit", "cloudkit"), ("Tests/CloudKitSchemaTests/Schemas", "schemas")] {
            try FileManager.default.copyItem(at: repository.appendingPathComponent(from), to: folder.appendingPathComponent(to))
        }
        return folder
    }

    @Test(arguments: names)
    func aPipelineFileThatOnceBrokeTheReaderIsReadOrRefusedWithDiagnostics(_ name: String) throws {
        // `Pipeline.load` refuses a file that is not UTF-8 before parsing it.
        guard let yaml = String(data: try Data(contentsOf: Self.failCases.appendingPathComponent(name)), encoding: .utf8) else { return }
        let folder = try Self.folder()
        defer { try? FileManager.default.removeItem(at: folder) }
        var outcome: Result<Pipeline, any Error>?
        let elapsed = threadCPUTime {
            outcome = Result {
                try Pipeline.parse(
                    yaml: yaml, filePath: folder.appendingPathComponent("pipeline.yml").path, components: .zonefeed, environment: Self.environment)
            }
        }
        #expect(elapsed < .seconds(10), "the fuzzer's bound for a hang, in CPU time: \(elapsed)")
        if case .failure(let error) = outcome {
            let diagnostics = (error as? PipelineFileError)?.diagnostics
            #expect(diagnostics?.isEmpty == false, "refused with \(type(of: error)) rather than its diagnostics: \(error)")
        }
    }
}
