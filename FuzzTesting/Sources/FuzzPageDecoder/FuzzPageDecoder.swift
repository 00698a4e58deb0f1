import CloudKitModel
import Foundation
import ZoneFeedPostgres

@testable import CloudKitWebServices

/// One answer of the server, read every way the client reads one: a `records/changes` page
/// straight from its bytes (the hot path), a `changes/database` page, a `records/query` page, and
/// the error body of a failed request. Throwing is the answer to a bad body; a trap, a hang or a huge allocation is
/// a finding.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzPageDecoder(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: start, count: count)
    let body = Data(buffer: bytes)

    var reader = JSONReader(bytes)
    let page = try? RecordZoneChangesResponse(reading: &reader)
    // PageReaderTests' promise: where both accept a page, JSONReader reads it as JSONDecoder does.
    var shape = JSONReader(bytes)
    if let page, (try? comparable(&shape)) == true, let decoded = try? JSONDecoder().decode(RecordZoneChangesResponse.self, from: body),
        wire(decoded) != wire(page)
    {
        fatalError("JSONReader and JSONDecoder read the same page differently:\n\(page)\n\(decoded)")
    }

    // Read again keeping fields as the page's JSON: the same records, and each written into a
    // row straight from its JSON as the model writes it.
    var kept = JSONBytes(copying: UnsafeRawBufferPointer(bytes), memory: unpooled).reader()
    let keptPage = try? RecordZoneChangesResponse(reading: &kept)
    if (page == nil) != (keptPage == nil) || page.map({ wire($0) }) != keptPage.map({ wire($0) }) {
        fatalError("the page reads differently when its fields are kept as JSON:\n\(String(describing: page))\n\(String(describing: keptPage))")
    }
    for entry in keptPage?.records ?? [] {
        guard case .record(let record) = entry else { continue }
        for evolving in [false, true] {
            if let disagreement = RowEncoder.disagreementWithModel(writing: record, with: rowMapping, evolving: evolving) {
                fatalError("a row written straight from JSON is not the model's: \(disagreement)\n\(record)")
            }
        }
    }

    var database = JSONReader(bytes)
    _ = try? DatabaseChangesResponse(reading: &database)

    var query = JSONReader(bytes)
    _ = try? RecordQueryResponse(reading: &query)

    // A failed request's body, and the wait before the next attempt that its retryAfter sets.
    _ = RetryPolicy(jitter: false).delay(afterAttempt: 1, retryAfter: ServerErrorBody(body).retryAfter)
    return 0
}

/// Page memory that keeps nothing for the next page: every page's bytes are freed with the page,
/// so that AddressSanitizer sees a record that outlives the page it points into.
let unpooled = PageMemory(mostKept: 0)

/// Every column type, under the names of the seed corpus's fields (straight-fields.json, and the
/// bench's), and a column made by evolution for STRING values.
let rowMapping: PostgresRecordTypeMapping = {
    let types: [(String, ColumnType)] = [
        ("s", .text), ("r", .text), ("i", .bigint), ("d", .doublePrecision), ("t", .timestamptz), ("b", .bytea), ("j", .jsonb),
        ("bo", .boolean), ("sl", .textArray), ("rl", .textArray), ("il", .bigintArray), ("dl", .doublePrecisionArray),
        ("tl", .timestamptzArray), ("bl", .byteaArray), ("title", .text), ("wordCount", .bigint), ("rating", .doublePrecision),
        ("editedAt", .timestamptz), ("thumbnail", .bytea), ("folder", .text), ("attachment", .jsonb), ("place", .jsonb),
        ("tags", .textArray), ("counts", .bigintArray), ("scores", .doublePrecisionArray), ("reminders", .timestamptzArray),
        ("chunks", .byteaArray), ("related", .textArray),
    ]
    var made = PostgresFieldMapping(field: "made", column: "made", type: .text)
    made.cloudKitType = "STRING"
    var mapping = PostgresRecordTypeMapping(
        recordType: "Note", table: "notes", fields: types.map { PostgresFieldMapping(field: $0.0, column: $0.0, type: $0.1) } + [made])
    mapping.omittedFields = ["leftOut"]
    return mapping
}()

/// A page as JSON, with every whole number an integer: `JSONValue`'s `Decodable` asks for an Int64
/// first, so JSONDecoder cannot tell `3.0` from `3`, which JSONReader keeps a double.
private func wire(_ page: RecordZoneChangesResponse) -> JSONValue {
    func wholeNumbersAsIntegers(_ value: JSONValue) -> JSONValue {
        switch value {
        case .double(let d): return Int64(exactly: d).map(JSONValue.int) ?? value
        case .array(let items): return .array(items.map(wholeNumbersAsIntegers))
        case .object(let members): return .object(members.mapValues(wholeNumbersAsIntegers))
        default: return value
        }
    }
    let records = JSONValue.array(page.records.map(\.json))
    return .object(["records": wholeNumbersAsIntegers(records), "syncToken": .string(page.syncToken), "moreComing": .bool(page.moreComing)])
}

/// Whether JSONDecoder's reading of the value ahead can be held against JSONReader's: no object
/// names a key twice (RFC 8259 leaves what that means to the reader: JSONReader keeps the last
/// value, JSONDecoder the first), no number is a Double JSONDecoder might read as an Int64 (see
/// below), and nothing nests deeper than 64 levels (`JSONValue`'s
/// `Decodable` takes time cubic in the depth, seconds at 400 levels, which would pass for a hang).
private func comparable(_ json: inout JSONReader, depth: Int = 0) throws -> Bool {
    guard depth <= 64 else { return false }
    switch json.peek() {
    case UInt8(ascii: "{"):
        try json.beginObject()
        var keys: Set<String> = []
        while let key = try json.nextKey() {
            guard keys.insert(key).inserted, try comparable(&json, depth: depth + 1) else { return false }
        }
    case UInt8(ascii: "["):
        try json.beginArray()
        while try json.nextElement() {
            guard try comparable(&json, depth: depth + 1) else { return false }
        }
    default:
        guard try json.peekIsNumber() else {
            try json.skipValue()
            return true
        }
        // A number with a fraction or exponent past 2^53, where Double keeps no fraction:
        // JSONDecoder may read `9223372036854775.080` as the Int64 9223372036854775, dropping
        // the fraction, where JSONReader keeps the Double the text is (a CI finding). Which
        // reading is right is not JSONDecoder's to say, so such a page is not compared.
        if case .double(let value) = try json.readNumber(), value.magnitude >= 9_007_199_254_740_992, value.magnitude < 9.3e18 {
            return false
        }
    }
    return true
}
