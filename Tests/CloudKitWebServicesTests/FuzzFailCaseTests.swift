import Foundation
import TestSupport
import Testing

@testable import CloudKitWebServices

/// Every input that once broke a fuzz target of this module (FuzzTesting/FailCases/<target>/),
/// read again the way the target reads it: each must end in a value, in well under the 10 s
/// that makes an input a hang for the fuzzer, and keep the promise the target checks.
@Suite struct FuzzFailCaseTests {
    @Test(arguments: failCases("FuzzTokenFile"))
    func aTokenFileThatOnceBrokeTheReaderGivesTokensARequestCanCarry(_ name: String) throws {
        let text = String(decoding: try failCase("FuzzTokenFile", name), as: UTF8.self)
        var contents: WebAuthTokenFile.Contents?
        let elapsed = threadCPUTime { contents = WebAuthTokenFile.contents(of: text) }
        #expect(elapsed < .seconds(10), "the fuzzer's bound for a hang, in CPU time: \(elapsed)")
        guard let contents else { return }
        for token in contents.tokens {
            #expect(!token.isEmpty && !token.contains(where: \.isNewline), "\(token.debugDescription)")
            #expect(token.first?.isWhitespace == false && token.last?.isWhitespace == false, "\(token.debugDescription)")
        }
        #expect(WebAuthTokenFile.contents(of: WebAuthTokenFile.text(of: contents)) == contents, "what zonefeed writes back reads the same")
    }
}

/// The names of the files in FuzzTesting/FailCases/<target>/, found from this file's place in
/// the repository; none when the target has never failed.
private func failCases(_ target: String) -> [String] {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: failCasesFolder(target).path)) ?? []
    return names.filter { !$0.hasPrefix(".") }.sorted()
}

private func failCase(_ target: String, _ name: String) throws -> Data {
    try Data(contentsOf: failCasesFolder(target).appendingPathComponent(name))
}

private func failCasesFolder(_ target: String) -> URL {
    URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../FuzzTesting/FailCases/\(target)").standardized
}
