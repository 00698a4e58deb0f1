import CloudKitSchema
import Foundation
import Testing

/// Every `.ckdb` text that once broke FuzzSchemaFile (FuzzTesting/FailCases/FuzzSchemaFile/),
/// parsed again as the target parses it: each must end in a schema or a syntax error with its
/// line and column, quickly.
@Suite struct SchemaFileFailCaseTests {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../FuzzTesting/FailCases/FuzzSchemaFile").standardized

    static var names: [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).filter { !$0.hasPrefix(".") }.sorted()
    }

    @Test(arguments: names)
    func aSchemaFileThatOnceBrokeTheReaderParsesOrIsRefusedWithAPlace(_ name: String) throws {
        // `CloudKitSchema(contentsOfFile:)` refuses a file that is not UTF-8 before parsing it.
        guard let text = String(data: try Data(contentsOf: Self.folder.appendingPathComponent(name)), encoding: .utf8) else { return }
        var outcome: Result<CloudKitSchema, SchemaSyntaxError>?
        let elapsed = ContinuousClock().measure { outcome = Result { () throws(SchemaSyntaxError) in try CloudKitSchema(parsing: text) } }
        #expect(elapsed < .seconds(1))
        if case .failure(let error) = outcome {
            #expect(error.position.line >= 1 && error.position.column >= 1, "\(error)")
        }
    }
}
