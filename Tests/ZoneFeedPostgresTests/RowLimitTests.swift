import CloudKitModel
import Testing

@testable import ZoneFeedPostgres

/// PostgreSQL takes a row of at most 1 GB. A record past that (a list of numbers grows sixfold
/// from its JSON; past 2 GB a list's length would not fit its word) is refused as a reject, in
/// the same words whether its fields are read straight from the page or from the model, and
/// the rows before and after it are written as ever. The limit is lowered here to a few KB.
@Suite struct RowLimitTests {
    static let limit = 8_192

    @Test func aRecordPastTheRowLimitIsARejectAndTheRowsAroundItAreWritten() throws {
        let numbers = (0..<2_000).map(String.init).joined(separator: ",")
        let halves = (0..<2_000).map { "\($0).5" }.joined(separator: ",")
        let words = (0..<1_000).map { #""word \#($0)""# }.joined(separator: ",")
        let records = try FieldsStraightFromJSONTests.records([
            #"{"s":{"type":"STRING","value":"before"}}"#,
            #"{"il":{"type":"INT64_LIST","value":[\#(numbers)]}}"#,
            #"{"dl":{"type":"DOUBLE_LIST","value":[\#(halves)]}}"#,
            #"{"sl":{"type":"STRING_LIST","value":[\#(words)]}}"#,
            #"{"s":{"type":"STRING","value":"\#(String(repeating: "x", count: Self.limit))"}}"#,
            #"{"s":{"type":"STRING","value":"after"}}"#,
        ])
        let past = "the record takes more than 8,192 bytes as a row, more than PostgreSQL takes in one"
        let expected: [String?] = [
            nil, "field il: \(past) (column il, bigint[])", "field dl: \(past) (column dl, double precision[])",
            "field sl: \(past) (column sl, text[])", past, nil,
        ]
        for inTheModel in [false, true] {
            var encoder = RowEncoder(mapping: FieldsStraightFromJSONTests.mapping, keepUnmapped: true)
            encoder.maxRowBytes = Self.limit
            var problems: [String?] = []
            for var record in records {
                #expect(FieldsStraightFromJSONTests.keptAsJSON(record))
                if inTheModel { record.fields = record.fields }
                let before = encoder.pendingByteCount
                let problem = encoder.append(record, seq: 0)
                problems.append(problem)
                if problem != nil { #expect(encoder.pendingByteCount == before, "a refused row leaves nothing behind") }
            }
            #expect(problems == expected, "\(inTheModel ? "from the model" : "straight from JSON")")
            #expect(encoder.rowCount == 2)
            #expect(encoder.valuesFromTheModel == 0, "a list past the limit is not read into the model to be refused")
        }
    }
}
