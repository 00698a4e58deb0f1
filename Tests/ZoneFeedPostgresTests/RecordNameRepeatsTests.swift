import CloudKitModel
import Testing

@testable import ZoneFeedPostgres

/// A batch goes straight into a table by COPY only when no record of it comes twice: the same
/// name twice must always be found, whatever the table's size and the names' lengths.
struct RecordNameRepeatsTests {
    @Test func aNameGivenAgainIsFoundAmongThousandsThatAreNot() {
        // Names of every length from 0 to 80 bytes, past the table's first size (it grows).
        let names = (0..<20_000).map { i in String(repeating: "x", count: i % 81) + "-\(i)" } + ["", "é", "e\u{301}"]
        var repeats = RecordNameRepeats(capacity: 1, hash: SeededByteHash())
        for name in names { repeats.insert(name) }
        let foundAmongDifferent = repeats.found
        #expect(!foundAmongDifferent, "20,003 different names")
        for again in ["", "-0", String(repeating: "x", count: 80) + "-80", "e\u{301}", names[19_999]] {
            var copy = RecordNameRepeats(capacity: names.count, hash: SeededByteHash())
            for name in names { copy.insert(name) }
            copy.insert(again)
            let found = copy.found
            #expect(found, "\(again) given twice")
        }
    }

    @Test func aRepeatInTheBackfillsShapeOfNamesIsFoundWhereverItComes() {
        // UUIDs, as CloudKit names records; the repeat first, in the middle, last.
        let names = (0..<5_000).map { i in "\(i)".padding(toLength: 8, withPad: "0", startingAt: 0) + "-EC9F-D656-8D2A-10258F3487C8" }
        for at in [0, 2_500, 4_999] {
            var repeats = RecordNameRepeats(capacity: names.count, hash: SeededByteHash())
            for (i, name) in names.enumerated() {
                repeats.insert(name)
                if i == at { repeats.insert(name) }
            }
            let found = repeats.found
            #expect(found, "the repeat after \(at)")
        }
    }
}
