import CloudKitModel
import Testing

@testable import ZoneFeedPostgres

/// The names a zone's copies wrote, by table: a name comes again in its own table without a
/// clash, and in another table with one, however many names came between.
@Suite struct DirectNamesTests {
    let hash = SeededByteHash()

    func entries(_ names: some Sequence<String>, table: Int) -> [UInt64] {
        names.map { name in
            var name = name
            return DirectNames.entry(hash: name.withUTF8 { hash($0) }, table: table)
        }
    }

    @Test func aNameInItsOwnTableAgainIsNoClashAndInAnotherIsOne() {
        var names = DirectNames()
        let many = (0..<50_000).map { "record-\($0)" }
        #expect(names.add(entries(many, table: 0)) == nil)
        #expect(names.count == 50_000, "every name kept through the table's growth")
        #expect(names.add(entries(many.prefix(10_000), table: 0)) == nil, "its own table again")
        #expect(names.count == 50_000)
        #expect(names.add(entries(["record-49999"], table: 2)) == 2, "the name of another table's record")
        #expect(names.add(entries(["something else"], table: 2)) == nil)
        #expect(names.add(entries(["twice"], table: 4) + entries(["twice"], table: 5)) == 5, "one name in two tables of one batch")
        #expect(names.add(entries(["caf\u{E9}"], table: 0) + entries(["cafe\u{301}"], table: 1)) == nil, "two names to CloudKit, however Swift compares them")
    }
}
