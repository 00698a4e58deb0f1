import CloudKitModel
import Foundation
import Testing

/// The one base64 of zonefeed: what it writes Foundation reads, and it reads back only what
/// RFC 4648's standard alphabet with padding writes.
struct Base64Tests {
    @Test func everyLengthRoundTripsAndMatchesFoundation() {
        var generator = SystemRandomNumberGenerator()
        for count in 0...64 {
            let bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let text = Base64.encode(bytes)
            #expect(text == Data(bytes).base64EncodedString(), "\(count) bytes")
            #expect(Base64.decode(text) == bytes, "\(count) bytes")
        }
    }

    @Test(arguments: [
        ("QQ", "no padding"),
        ("QQ=", "half the padding"),
        ("QQ===", "too much padding"),
        ("====", "padding alone"),
        ("-_8=", "URL-safe symbols"),
        ("QR==", "bits left over that are not zero"),
        ("QUJD\n", "a line end"),
        ("QU JD", "a space"),
        ("QQ==QQ==", "padding inside"),
        ("QUJ!", "a symbol outside the alphabet, in a whole group"),
        ("QUJDRUZ\u{e9}Q==", "a letter outside ASCII"),
        ("QUJDR*==", "a symbol outside the alphabet before the padding"),
    ])
    func textThatIsNotStandardBase64IsRefused(text: String, why: String) {
        #expect(Base64.decode(text) == nil, "\(why): \(text.debugDescription)")
    }

    @Test func theEmptyTextIsNoBytes() {
        #expect(Base64.decode("") == [])
    }
}
