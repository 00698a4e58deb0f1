import CloudKitModel
import Testing

@testable import ZoneFeedPostgres

/// Field names are found by their bytes: a name is found exactly when every byte matches, at
/// every length the word-at-a-time compare treats differently.
struct FieldNameTableTests {
    @Test func aNameIsTheSameOnlyWhenEveryByteIs() {
        for count in 1...40 {
            let name = (0..<count).map { UInt8(ascii: "a") + UInt8($0 % 26) }
            var candidates = [name]
            for i in name.indices {
                var changed = name
                changed[i] ^= 0x01
                candidates.append(changed)
            }
            for candidate in candidates {
                let same = name.withUnsafeBufferPointer { a in
                    candidate.withUnsafeBufferPointer { JSONReader.sameBytes(a.baseAddress!, $0.baseAddress!, count: count) }
                }
                #expect(same == (candidate == name), "\(count) bytes, \(String(decoding: candidate, as: UTF8.self))")
            }
        }
    }

    @Test func namesAreFoundByTheirBytesAndOthersAreNot() {
        var table = FieldNameTable()
        let names = (0..<300).map { "field\($0)" } + ["a", "ab", "abc", "ENCRYPTED_BYTES_LIST", "x" + String(repeating: "y", count: 40)]
        for (i, name) in names.enumerated() { table.insert(Array(name.utf8), value: i) }
        for (i, name) in names.enumerated() {
            #expect(Array(name.utf8).withUnsafeBufferPointer { table.value(for: $0) } == i, "\(name)")
        }
        for other in ["field300", "Field1", "field1 ", "b", "", "x" + String(repeating: "y", count: 39) + "z"] {
            #expect(Array(other.utf8).withUnsafeBufferPointer { table.value(for: $0) } == nil, "\(other)")
        }
    }

    /// The hash reads a name in words of eight bytes, or four, or three single bytes, by its
    /// length: at every length, names one byte apart are told apart, wherever that byte is, and
    /// the empty name is a name like any other.
    @Test func namesOneByteApartAreToldApartAtEveryLength() {
        var table = FieldNameTable()
        var names: [[UInt8]] = [[]]
        for count in 1...40 {
            let name = (0..<count).map { UInt8(ascii: "a") + UInt8($0 % 26) }
            names.append(name)
            for i in name.indices {
                var changed = name
                changed[i] ^= 0x01
                names.append(changed)
            }
        }
        for (i, name) in names.enumerated() { table.insert(name, value: i) }
        #expect(table.count == names.count)
        for (i, name) in names.enumerated() {
            #expect(name.withUnsafeBufferPointer { table.value(for: $0) } == i, "\(String(decoding: name, as: UTF8.self))")
        }
    }

    /// A record's names are looked for first where the record before had them: whatever the
    /// order, and however it changes from one record to the next, each name comes out as it
    /// does by its hash alone.
    @Test func namesInAnyOrderAreFoundAsByTheirHashAlone() {
        var table = FieldNameTable()
        let known = (0..<40).map { "field\($0)" } + ["", "a", "ab", "title", "titles", "tItle", "x" + String(repeating: "y", count: 30)]
        for (i, name) in known.enumerated() { table.insert(Array(name.utf8), value: i) }
        // Names the table lacks, among them some of the same length as known ones.
        let others = ["field40", "fielD1", "Title", "b", "x" + String(repeating: "y", count: 29) + "z", "unknown"]
        var generator = SystemRandomNumberGenerator()
        var record = known.shuffled(using: &generator)
        var looked = 0
        for round in 0..<400 {
            switch round % 5 {
            case 0: record.shuffle(using: &generator)
            case 1: if record.count > 1 { record.swapAt(0, Int.random(in: 1..<record.count, using: &generator)) }
            case 2: record.insert(others.randomElement(using: &generator)!, at: Int.random(in: 0...record.count, using: &generator))
            case 3: if !record.isEmpty { record.remove(at: Int.random(in: 0..<record.count, using: &generator)) }
            default: record.append(known.randomElement(using: &generator)!)  // a name given twice
            }
            // Now and then more fields than the table remembers places for.
            let names = round % 50 == 49 ? record + (0..<300).map { "field\($0 % 45)" } : record
            var cursor = FieldNameTable.Cursor()
            for (place, name) in names.enumerated() {
                let bytes = Array(name.utf8)
                let predicted = bytes.withUnsafeBufferPointer { table.value(for: $0, after: &cursor) }
                let hashed = bytes.withUnsafeBufferPointer { table.value(for: $0) }
                #expect(predicted == hashed, "\(name) at \(place) in round \(round)")
                #expect(hashed == known.firstIndex(of: name), "\(name)")
                looked += 1
            }
        }
        #expect(looked > 400 * known.count / 2)
    }

    /// Which names share a slot depends on a seed each table draws: the same names hash apart in
    /// another table, so a server cannot pick names that all fall into one run of slots.
    @Test func eachTableHashesWithASeedOfItsOwn() {
        let name = Array("wordCount".utf8)
        let hashes = Set((0..<8).map { _ in name.withUnsafeBufferPointer { FieldNameTable().hash($0) } })
        #expect(hashes.count == 8)
    }
}
