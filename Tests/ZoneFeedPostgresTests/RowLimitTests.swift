import CloudKitModel
import Testing

@testable import ZoneFeedPostgres

/// PostgreSQL takes a row of at most 1 GB, an array of at most 134,217,727 elements and 1 GB in
/// its memory, and a jsonb of at most 268,435,455 bytes. A record past one of them (a list of
/// numbers grows sixfold from its JSON; past 2 GB a list's length would not fit its word) is
/// refused as a reject, in the same words whether its fields are read straight from the page
/// or from the model, and the rows before and after it are written as ever. The limits are
/// lowered here to a few KB.
@Suite struct RowLimitTests {
    @Test func aRecordPastWhatPostgreSQLTakesIsARejectAndTheRowsAroundItAreWritten() throws {
        func list(_ count: Int, _ element: (Int) -> String) -> String { (0..<count).map(element).joined(separator: ",") }
        let records = try FieldsStraightFromJSONTests.records([
            #"{"s":{"type":"STRING","value":"before"}}"#,
            #"{"il":{"type":"INT64_LIST","value":[\#(list(2_000) { "\($0)" })]}}"#,
            #"{"dl":{"type":"DOUBLE_LIST","value":[\#(list(2_000) { "\($0).5" })]}}"#,
            // Eight characters an element: as many bytes in the server's memory as in COPY's form.
            #"{"sl":{"type":"STRING_LIST","value":[\#(list(1_000) { "\"w\(String(10_000_000 + $0).dropFirst())\"" })]}}"#,
            #"{"s":{"type":"STRING","value":"\#(String(repeating: "x", count: 8_192))"}}"#,
            // 6 KB as COPY writes it, 9.6 KB in the server's memory (8 bytes a one-letter text).
            #"{"sl":{"type":"STRING_LIST","value":[\#(list(1_200) { _ in #""a""# })]}}"#,
            // Few bytes, more elements than the array may hold.
            #"{"sl":{"type":"STRING_LIST","value":[\#(list(1_600) { _ in #""""# })]}}"#,
            #"{"j":{"type":"STRING","value":"\#(String(repeating: "y", count: 2_000))"}}"#,
            #"{"extra":{"type":"STRING","value":"\#(String(repeating: "z", count: 2_000))"}}"#,
            #"{"s":{"type":"STRING","value":"after"}}"#,
        ])
        let row = "the record takes more than 8,192 bytes as a row, more than PostgreSQL takes in one"
        let array = "the list is larger than a PostgreSQL array can be (1,500 elements, 8,192 bytes)"
        let jsonb = "the JSON takes more than 1,000 bytes, more than PostgreSQL's jsonb holds"
        let expected: [String?] = [
            nil, "field il: \(row) (column il, bigint[])", "field dl: \(row) (column dl, double precision[])",
            "field sl: \(row) (column sl, text[])", row, "field sl: \(array) (column sl, text[])", "field sl: \(array) (column sl, text[])",
            "field j: \(jsonb) (column j, jsonb)", "the fields without a column: \(jsonb) (the fields column)", nil,
        ]
        for inTheModel in [false, true] {
            var encoder = RowEncoder(mapping: FieldsStraightFromJSONTests.mapping, keepUnmapped: true)
            (encoder.maxRowBytes, encoder.maxArrayElements, encoder.jsonb) = (8_192, 1_500, JSONBLimits(maxBytes: 1_000))
            var problems: [String?] = []
            for var record in records {
                #expect(FieldsStraightFromJSONTests.keptAsJSON(record))
                if inTheModel { record.fields = record.fields }
                let before = encoder.pendingByteCount
                let problem = encoder.append(record, seq: 0)
                problems.append(problem)
                if problem != nil { #expect(encoder.pendingByteCount == before, "a refused row leaves nothing behind") }
            }
            for (i, (problem, wanted)) in zip(problems, expected).enumerated() {
                #expect(problem == wanted, "record \(i), \(inTheModel ? "from the model" : "straight from JSON")")
            }
            #expect(encoder.rowCount == 2)
            #expect(encoder.valuesFromTheModel == 0, "a value past a limit is not read into the model to be refused")
        }
    }

    /// jsonb's binary form and the server's parse have limits of their own: a list of small
    /// numbers far shorter than `maxBytes` can still hold more elements than the server parses.
    /// Such a value, or fields column, is a reject too; the limits are lowered here.
    @Test func jsonWithMoreElementsThanJSONBTakesIsARejectThoughItsTextIsShort() throws {
        func zeros(_ count: Int) -> String { Array(repeating: "0", count: count).joined(separator: ",") }
        let records = try FieldsStraightFromJSONTests.records([
            #"{"extra":{"type":"INT64_LIST","value":[\#(zeros(25))]}}"#,
            #"{"extra":{"type":"INT64_LIST","value":[\#(zeros(20))]}}"#,
            #"{"j":{"value":{"latitude":1.5,"longitude":2.5,"altitude":3.0,"speed":0.0,"course":0.0,"timestamp":1},"type":"LOCATION"}}"#,
            #"{"j":{"value":{"latitude":1.5,"longitude":2.5,"altitude":3.0},"type":"LOCATION"}}"#,
        ])
        let expected: [String?] = [
            "the fields without a column: the JSON holds a list of more than 20 elements, more than PostgreSQL's jsonb takes (the fields column)",
            nil,
            "field j: the JSON holds an object of more than 5 members, more than PostgreSQL's jsonb takes (column j, jsonb)",
            nil,
        ]
        for inTheModel in [false, true] {
            var encoder = RowEncoder(mapping: FieldsStraightFromJSONTests.mapping, keepUnmapped: true)
            encoder.jsonb = JSONBLimits(maxBytes: 100_000, maxListElements: 20, maxObjectMembers: 5)
            var problems: [String?] = []
            for var record in records {
                if inTheModel { record.fields = record.fields }
                let before = encoder.pendingByteCount
                problems.append(encoder.append(record, seq: 0))
                if problems.last! != nil { #expect(encoder.pendingByteCount == before, "a refused row leaves nothing behind") }
            }
            #expect(problems == expected, "\(inTheModel ? "from the model" : "straight from JSON")")
            #expect(encoder.rowCount == 2)
        }
    }
}
