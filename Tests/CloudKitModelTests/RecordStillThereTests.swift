import CloudKitModel
import Testing

/// Which entries name a record that is still at the source: the names a resync's sweep, or a
/// public database's, must not take for deleted although the entry could not be applied.
@Suite struct RecordStillThereTests {
    static func unreadable(_ name: String?) -> RecordEntry {
        .unreadable(UnreadableEntry(recordName: name, recordType: "Note", problem: "field title holds text that is not valid UTF-8", json: .null))
    }

    static func error(_ code: String) -> RecordEntry {
        .error(RecordError(recordName: "R1", reason: "r", serverErrorCode: code))
    }

    @Test func entriesThatSayTheRecordIsThereNameIt() {
        #expect(RecordEntry.record(Record(recordName: "R1", recordType: "Note", fields: [:])).nameOfARecordStillThere == "R1")
        #expect(Self.error("TRY_AGAIN_LATER").nameOfARecordStillThere == "R1")
        #expect(Self.error("ACCESS_DENIED").nameOfARecordStillThere == "R1")
        #expect(Self.unreadable("R1").nameOfARecordStillThere == "R1")
    }

    /// A deletion, an error that says the record is not there, and a name that was repaired
    /// (U+FFFD stands for bytes that were not UTF-8: not the record's identity) name none.
    @Test func entriesThatDoNotSayTheRecordIsThereNameNone() {
        #expect(RecordEntry.deleted(recordName: "R1").nameOfARecordStillThere == nil)
        #expect(Self.error("NOT_FOUND").nameOfARecordStillThere == nil)
        #expect(Self.error("UNKNOWN_ITEM").nameOfARecordStillThere == nil)
        #expect(Self.unreadable("R\u{FFFD}1").nameOfARecordStillThere == nil)
        #expect(Self.unreadable(nil).nameOfARecordStillThere == nil)
    }
}
