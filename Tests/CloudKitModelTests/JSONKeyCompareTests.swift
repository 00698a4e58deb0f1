import Testing

@testable import CloudKitModel

/// Keys and type tags are compared as integers loaded from their bytes: the answer is still
/// whether the bytes spell the word, at every length.
struct JSONKeyCompareTests {
    static let words: [StaticString] = [
        "", "a", "id", "abc", "type", "value", "STRING", "ASSETID", "LOCATION", "TIMESTAMP", "recordName", "STRING_LIST",
        "serverErrorCode", "recordChangeTag", "ENCRYPTED_BYTES", "ownerRecordName!", "ENCRYPTED_BYTES_LIST",
    ]

    @Test func aWordEqualsExactlyItsOwnBytes() {
        for word in Self.words {
            let letters = Array(UnsafeBufferPointer(start: word.utf8Start, count: word.utf8CodeUnitCount))
            var candidates = [letters, letters + [UInt8(ascii: "x")], Array(letters.dropLast())]
            // Each byte changed in turn, first and last included.
            for i in letters.indices {
                var changed = letters
                changed[i] ^= 0x20
                candidates.append(changed)
            }
            for candidate in candidates {
                let equal = candidate.withUnsafeBufferPointer { JSONReader.equal($0, word) }
                #expect(equal == (candidate == letters), "\(word) against \(String(decoding: candidate, as: UTF8.self))")
            }
        }
    }

    @Test func theFieldObjectsKeysAreTheWordsTheirConstantsSpell() {
        func word(_ text: String) -> UInt64 {
            text.utf8.enumerated().reduce(0) { word, byte in word | UInt64(byte.element) << (8 * UInt64(byte.offset)) }
        }
        #expect(JSONReader.valueKey == word(#""value":"#))
        #expect(JSONReader.typeKey == word(#""type":"#))
        #expect(JSONReader.typeKeyAndQuote == word(#""type":""#))
        #expect(JSONReader.commaTypeKey == word(#","type":"#))
        #expect(JSONReader.commaValueKey == word(#","value""#))
    }
}
