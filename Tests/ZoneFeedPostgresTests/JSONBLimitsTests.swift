import Testing

@testable import ZoneFeedPostgres

/// What PostgreSQL's jsonb refuses, found in the text before the server refuses it at every try
/// of a batch: a list or an object with more elements than the server's parse can hold, and a
/// binary form past 268,435,455 bytes, which a list of small numbers reaches from text six times
/// smaller. The limits are lowered here; the real ones were measured with psql against
/// PostgreSQL 15 (`'[' || repeat('0,', n) || '0]'` casts to jsonb up to 16,777,216 elements, an
/// object up to 8,388,608 members).
@Suite struct JSONBLimitsTests {
    /// Lists of 40 elements at most, objects of 20 members, 1,000 bytes.
    let limits = JSONBLimits(maxBytes: 1_000, maxListElements: 40, maxObjectMembers: 20)

    func problem(_ text: String) -> String? {
        Array(text.utf8).withUnsafeBufferPointer { limits.problem(with: $0) }
    }

    func list(_ count: Int, _ element: String = "0") -> String { "[" + Array(repeating: element, count: count).joined(separator: ",") + "]" }

    func object(_ count: Int) -> String { "{" + (0..<count).map { "\"k\($0)\":0" }.joined(separator: ",") + "}" }

    @Test func aListOrAnObjectPastWhatTheServerParsesIsRefusedWhereverItIs() {
        let tooMany = "the JSON holds a list of more than 40 elements, more than PostgreSQL's jsonb takes"
        let tooManyMembers = "the JSON holds an object of more than 20 members, more than PostgreSQL's jsonb takes"
        #expect(problem(list(40)) == nil)
        #expect(problem(list(41)) == tooMany)
        #expect(problem(object(20)) == nil)
        #expect(problem(object(21)) == tooManyMembers)
        // Nested, beside others, with room to spare in the containers around it.
        #expect(problem(#"{"a":[1,2],"b":{"c":\#(list(41))}}"#) == tooMany)
        #expect(problem("[[1],\(object(21)),2]") == tooManyMembers)
        #expect(problem("[\(list(30)),\(list(30))]") == nil, "each list counts its own")
    }

    @Test func separatorsAndBracketsInsideStringsAreText() {
        let text = "\"" + String(repeating: ",[]{}:\\\"", count: 60) + "\""
        #expect(text.utf8.count > limits.alwaysFits, "looked through, not passed at once")
        #expect(problem(text) == nil)
        #expect(problem("[" + text + "]") == nil)
        #expect(problem("[\(text),\(list(41))]") != nil, "what follows the string is still counted")
    }

    @Test func aBinaryFormPastTheLimitIsRefusedThoughTheTextIsShorter() {
        // 60 one-digit numbers: 121 bytes of text, 12 bytes an element more in the binary form.
        let small = JSONBLimits(maxBytes: 600, maxListElements: 1_000, maxObjectMembers: 1_000)
        func problem(_ text: String) -> String? { Array(text.utf8).withUnsafeBufferPointer { small.problem(with: $0) } }
        #expect(problem(list(30)) == nil)
        #expect(
            problem(list(60))
                == "the JSON would take more than 600 bytes as PostgreSQL's jsonb, more than it holds (its elements take more there than in the text)")
        // Long strings grow by their entry only.
        #expect(problem(list(3, "\"" + String(repeating: "x", count: 150) + "\"")) == nil)
        #expect(problem(String(repeating: " ", count: 601)) == "the JSON takes more than 600 bytes, more than PostgreSQL's jsonb holds")
    }

    /// Text up to `alwaysFits` is not looked through: no JSON that short can pass a limit.
    @Test func textShortEnoughToFitWhateverItHoldsIsNotLookedThrough() {
        for limits in [limits, JSONBLimits(), JSONBLimits(maxBytes: 600, maxListElements: 1_000, maxObjectMembers: 1_000)] {
            let n = limits.alwaysFits
            // The most elements text of n bytes holds: one-digit numbers, or empty keys.
            let elements = (n + 1) / 2
            #expect(elements <= limits.maxListElements && elements <= limits.maxObjectMembers, "\(limits)")
            #expect(n + JSONBLimits.bytesPerElement * elements <= limits.maxBytes, "\(limits)")
        }
        #expect(JSONBLimits().alwaysFits == 16_777_215)
    }
}
