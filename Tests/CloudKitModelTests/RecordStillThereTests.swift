import Testing

@testable import CloudKitModel

/// Which entries name a record that is still at the source: the names a resync's sweep, or a
/// public database's, must not take for deleted although the entry could not be applied.
@Suite struct RecordStillThereTests {
    static func unreadable(_ name: String?) -> RecordEntry {
        .unreadable(UnreadableEntry(recordName: name, recordType: "Note", problem: "field title holds text that is not valid UTF-8", json: .null))
    }

    static func error(_ code: String) -> RecordEntry {
        .error(RecordError(recordName: "R1", reason: "r", serverErrorCode: code))
    }

    /// An entry as read from an answer's bytes: a record whose `title` holds bytes that are not
    /// UTF-8 (unreadable), named by `name`'s bytes.
    static func read(name: [UInt8]) throws -> RecordEntry {
        let bytes =
            Array(#"{"recordName":""#.utf8) + name + Array(#"","recordType":"Note","fields":{"title":{"value":""#.utf8) + [0xC3, 0x28]
            + Array(#"","type":"STRING"}}}"#.utf8)
        return try bytes.withUnsafeBufferPointer { buffer in
            var reader = JSONReader(buffer)
            return try RecordEntry(reading: &reader)
        }
    }

    /// A name that holds U+FFFD as sent (its three bytes, or the escape) is the record's; one
    /// whose bytes were not UTF-8, and were replaced by it, is not. Told apart by U+FFFD in the
    /// name, before, the first was taken for repaired, left out of a sweep's list, and its row
    /// tombstoned while the record was still there.
    @Test func anUnreadableEntryNamesItsRecordUnlessItsNameWasRepaired() throws {
        let sent = try Self.read(name: Array("Note-\u{FFFD}".utf8))
        guard case .unreadable = sent else {
            Issue.record("the title makes the entry unreadable: \(sent)")
            return
        }
        #expect(sent.nameOfARecordStillThere == "Note-\u{FFFD}")
        #expect(try Self.read(name: Array(#"Note-\ufffd"#.utf8)).nameOfARecordStillThere == "Note-\u{FFFD}")
        #expect(try Self.read(name: Array("Note-".utf8) + [0xFF]).nameOfARecordStillThere == nil)
    }

    @Test func entriesThatSayTheRecordIsThereNameIt() {
        #expect(RecordEntry.record(Record(recordName: "R1", recordType: "Note", fields: [:])).nameOfARecordStillThere == "R1")
        #expect(Self.error("TRY_AGAIN_LATER").nameOfARecordStillThere == "R1")
        #expect(Self.error("ACCESS_DENIED").nameOfARecordStillThere == "R1")
        #expect(Self.unreadable("R1").nameOfARecordStillThere == "R1")
    }

    /// A deletion, an error that says the record is not there, and a name that was repaired
    /// (bytes that were not UTF-8 replaced: not the record's identity) name none.
    @Test func entriesThatDoNotSayTheRecordIsThereNameNone() {
        #expect(RecordEntry.deleted(recordName: "R1").nameOfARecordStillThere == nil)
        #expect(Self.error("NOT_FOUND").nameOfARecordStillThere == nil)
        #expect(Self.error("UNKNOWN_ITEM").nameOfARecordStillThere == nil)
        let repaired = UnreadableEntry(recordName: "R\u{FFFD}1", recordType: "Note", problem: "p", json: .null, nameRepaired: true)
        #expect(RecordEntry.unreadable(repaired).nameOfARecordStillThere == nil)
        #expect(Self.unreadable(nil).nameOfARecordStillThere == nil)
    }
}
