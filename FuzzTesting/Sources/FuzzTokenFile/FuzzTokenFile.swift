import Foundation

@testable import CloudKitWebServices

/// A web auth token file's text, read as the client reads it when a run starts. What it reads
/// must be tokens a request can carry, and what zonefeed writes back must read the same.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTokenFile(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    // The file is read as UTF-8 (`String(contentsOfFile:encoding:)`); other bytes never get here.
    guard let text = String(bytes: UnsafeBufferPointer(start: start, count: count), encoding: .utf8),
        let contents = WebAuthTokenFile.contents(of: text)
    else { return 0 }
    for token in contents.tokens where token.isEmpty || token.unicodeScalars.contains(where: { $0 == "\n" || $0 == "\r" }) {
        fatalError("the token file gave a token that is empty or holds a line break: \(token.debugDescription)")
    }
    let written = WebAuthTokenFile.text(of: contents)
    guard WebAuthTokenFile.contents(of: written) == contents else {
        fatalError("the token file as written reads differently:\n\(contents)\n\(String(describing: WebAuthTokenFile.contents(of: written)))")
    }
    return 0
}
