import Foundation

@testable import CloudKitWebServices

/// A web auth token file's text, read as the client reads it when a run starts. What it reads
/// must be tokens a request can carry, and what zonefeed writes back must read the same.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTokenFile(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    // The file is read as UTF-8 (`String(contentsOfFile:encoding:)`); other bytes never get here.
    guard let text = String(bytes: UnsafeBufferPointer(start: start, count: count), encoding: .utf8) else { return 0 }
    // An ASCII file is read from its bytes: it must read as Characters and Foundation read it.
    guard WebAuthTokenFile.contents(of: text) == WebAuthTokenFile.contentsOfAnyText(text) else {
        fatalError("the token file reads differently from its bytes and as Characters: \(text.debugDescription)")
    }
    guard WebAuthTokenFile.longestLine(of: text) == text.split(whereSeparator: \.isNewline).map(\.utf8.count).max() else {
        fatalError("the token file's longest line is measured differently from its bytes: \(text.debugDescription)")
    }
    guard let contents = WebAuthTokenFile.contents(of: text) else { return 0 }
    // A request carries a token as it was read: one with a line break or spaces around it is refused.
    for token in contents.tokens
    where token.isEmpty || token.contains(where: \.isNewline) || token.first!.isWhitespace || token.last!.isWhitespace {
        fatalError("the token file gave a token that is empty, holds a line break or has spaces around it: \(token.debugDescription)")
    }
    let written = WebAuthTokenFile.text(of: contents)
    guard WebAuthTokenFile.contents(of: written) == contents else {
        fatalError("the token file as written reads differently:\n\(contents)\n\(String(describing: WebAuthTokenFile.contents(of: written)))")
    }
    return 0
}
