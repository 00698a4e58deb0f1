import Foundation
import ZoneFeed
import ZoneFeedComponents

/// A pipeline file's text, read as `zonefeed validate` and `run` read it, with every component the
/// program knows (both sources, PostgreSQL, metrics, watch). Diagnostics are the answer to a bad
/// file; any other error, a trap, a hang or a huge allocation is a finding.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzPipelineFile(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    // `Pipeline.load` refuses a file that is not UTF-8 before parsing it.
    guard let yaml = String(bytes: UnsafeBufferPointer(start: start, count: count), encoding: .utf8) else { return 0 }
    do {
        _ = try Pipeline.parse(yaml: yaml, filePath: folder + "/pipeline.yml", components: .zonefeed, environment: environment)
    } catch is PipelineFileError {
        // A refused file.
    } catch {
        fatalError("a pipeline file refused with \(type(of: error)) rather than its diagnostics: \(error)")
    }
    return 0
}

/// The variables the corpus' files name, one of them empty, so that `${VAR}` and `${VAR:-x}` are
/// read both ways.
private let environment = [
    "CLOUDKIT_API_TOKEN": "ck-api-token", "CLOUDKIT_WEB_AUTH_TOKEN": "ck-web-auth-token", "DATABASE_URL": "postgresql://etl@db.internal/analytics",
    "FAKE_CLOUDKIT_URL": "http://127.0.0.1:8765", "EMPTY": "",
]

/// The pipeline file's folder: a new temporary one holding the schema files the corpus names
/// (`recordTypes: { schemaFile }` is read relative to the pipeline file): the examples' own as
/// `cloudkit/*.ckdb`, and the schema reader's test files as `schemas/*.ckdb`. So a relative path
/// reads nothing of the machine's (an absolute one, or one through `..`, still could).
private let folder: String = {
    var template = Array((NSTemporaryDirectory() + "/zonefeed-fuzz-pipeline-XXXXXX").utf8CString)
    guard let made = mkdtemp(&template) else { fatalError("cannot make a temporary folder: \(String(cString: strerror(errno)))") }
    let folder = URL(fileURLWithPath: String(cString: made))
    let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../..").standardized
    for (from, to) in [("pipelines/cloudkit", "cloudkit"), ("Tests/CloudKitSchemaTests/Schemas", "schemas")] {
        try! FileManager.default.copyItem(at: repository.appendingPathComponent(from), to: folder.appendingPathComponent(to))
    }
    madeFolder = folder.path
    // libFuzzer ends a run with exit(), which runs this; a crash leaves the folder for its report.
    atexit { if let madeFolder { try? FileManager.default.removeItem(atPath: madeFolder) } }
    return folder.path
}()

/// The folder above once made, for the exit handler (a C function pointer captures nothing).
nonisolated(unsafe) private var madeFolder: String?
