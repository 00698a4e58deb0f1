import Testing

@testable import CloudKitModel

/// The fields of a page's records are kept in one index for the page (`JSONBytes.keep`), in
/// blocks of 64 KiB (1,638 fields): each record keeps its own fields, in their order, whether
/// they fit the block being filled, start a new one, or are more than a block holds; fields that
/// are not kept leave nothing behind.
struct KeptFieldsIndexTests {
    /// A `fields` object of `count` INT64 fields, `prefix0` … with the values 0 …
    static func fieldsObject(_ prefix: String, count: Int) -> String {
        "{" + (0..<count).map { "\"\(prefix)\($0)\":{\"value\":\($0),\"type\":\"INT64\"}" }.joined(separator: ",") + "}"
    }

    /// A page's index holds one entry a field of every record on it (200 records of about 20
    /// fields): an entry is 40 bytes, as `RawField` says.
    @Test func aFieldsEntryTakesFortyBytes() {
        #expect(MemoryLayout<RawField>.stride == 40)
    }

    @Test func everyRecordKeepsItsOwnFieldsAcrossBlocks() throws {
        // Counts that fill the first block part way, cross into the next (30), need more than a
        // block (2,000), come after a record that is not kept, and have no field at all.
        #expect(JSONBytes.keptBlockBytes / MemoryLayout<RawField>.stride == 1_638)
        let counts = [3, 1_620, 30, 2_000, 7, 0] + Array(repeating: 20, count: 120)
        var text = "["
        var offsets: [Int] = []
        for (i, count) in counts.enumerated() {
            if i > 0 { text += "," }
            if i == 4 {
                // Not kept, after its first fields were written to the index: a name written
                // with an escape is read into the model.
                offsets.append(text.utf8.count)
                text += Self.fieldsObject("r\(i)f", count: count).dropLast() + #","r\u0066":{"value":1,"type":"INT64"}}"#
                continue
            }
            offsets.append(text.utf8.count)
            text += Self.fieldsObject("r\(i)f", count: count)
        }
        text += "]"
        let page = JSONBytes.copying(Array(text.utf8))
        let read = try RecordFields.read(from: page, at: offsets)

        #expect(read.count == counts.count)
        var kept = 0
        for (i, fields) in read.enumerated() {
            let expected = (0..<counts[i]).map { "r\(i)f\($0)" }
            guard case .json(let raw) = fields else {
                #expect(i == 4, "record \(i) was not kept")
                #expect(fields.values.count == counts[i] + 1 && fields.values["rf"] == .int64(1))
                continue
            }
            kept += 1
            let names = withExtendedLifetime(raw.page) {
                raw.fields.map { String(decoding: page.buffer[Int($0.name.lowerBound)..<Int($0.name.upperBound)], as: UTF8.self) }
            }
            #expect(names == expected, "record \(i)")
            #expect(raw.values.count == counts[i], "record \(i)")
            #expect(raw.values["r\(i)f\(max(0, counts[i] - 1))"].map { $0 == .int64(Int64(counts[i] - 1)) } ?? (counts[i] == 0), "record \(i)")
        }
        #expect(kept == counts.count - 1)
    }
}
