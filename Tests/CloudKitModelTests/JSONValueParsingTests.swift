import Testing

@testable import CloudKitModel

/// `JSONValue(parsing:)`, the reader of a value from outside (a web courier's notification):
/// one JSON text whole, as `JSONDecoder` reads it, its nesting bounded.
@Suite struct JSONValueParsingTests {
    func parse(_ text: String) throws -> JSONValue {
        try Array(text.utf8).withUnsafeBytes { try JSONValue(parsing: $0) }
    }

    @Test func aTextIsReadWholeWithTheWhiteSpaceAroundIt() throws {
        #expect(
            try parse(#" {"ck": {"qry": {"zid": "Zone01", "fo": 3}}, "n": [1, 2.5, null, true]} "#)
                == .object([
                    "ck": .object(["qry": .object(["zid": .string("Zone01"), "fo": .int(3)])]), "n": .array([.int(1), .double(2.5), .null, .bool(true)]),
                ]))
    }

    @Test(arguments: [#"{"a":1} {"b":2}"#, #"{"a":1"#, "", "[1,]", #"{"a":1}x"#])
    func anythingButOneValueIsRefused(text: String) {
        #expect(throws: (any Error).self) { try parse(text) }
    }

    @Test func nestingIsBounded() throws {
        let within = String(repeating: "[", count: 512) + String(repeating: "]", count: 512)
        let past = String(repeating: "[", count: 513) + String(repeating: "]", count: 513)
        _ = try parse(within)
        #expect(throws: (any Error).self) { try parse(past) }
    }
}
