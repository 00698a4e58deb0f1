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

    /// Which names share a slot depends on a seed each table draws: the same names hash apart in
    /// another table, so a server cannot pick names that all fall into one run of slots.
    @Test func eachTableHashesWithASeedOfItsOwn() {
        let name = Array("wordCount".utf8)
        let hashes = Set((0..<8).map { _ in name.withUnsafeBufferPointer { FieldNameTable().hash($0) } })
        #expect(hashes.count == 8)
    }
}
