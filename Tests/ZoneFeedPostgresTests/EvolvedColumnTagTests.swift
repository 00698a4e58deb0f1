import CloudKitModel
import Testing

@testable import ZoneFeedPostgres

/// Which values a column made by evolution takes, by the CloudKit tag it was made for: the
/// tags CloudKit gives one type are one, and a column made for a tag of no type (by an older
/// zonefeed, which made them) takes what any jsonb takes.
@Suite struct EvolvedColumnTagTests {
    static let asset = JSONValue.object(["fileChecksum": .string("c")])

    @Test(arguments: [
        ("ASSETID", FieldValue.asset(tag: "ASSET", asset), true),
        ("ASSET", .asset(tag: "ASSETID", asset), true),
        ("STRING_LIST", .list(tag: "UNKNOWN_LIST", []), true),
        ("INT64_LIST", .list(tag: "UNKNOWN_LIST", []), true),
        ("UNKNOWN_LIST", .list(tag: "STRING_LIST", [.string("a")]), true),
        ("UNKNOWN", .string("a"), true),
        ("STRING", .list(tag: "UNKNOWN_LIST", []), false),
        ("STRING_LIST", .unknown(tag: "UNKNOWN_LIST", .array([.int(1)])), false),
        ("DOUBLE", .int64(1), false),
        ("LOCATION", .string("here"), false),
    ])
    func aColumnMadeForATagTakesTheOtherTagsOfItsTypeOnly(made: String, value: FieldValue, taken: Bool) {
        #expect(SchemaGrowth.columnMade(for: made, takes: value) == taken, "\(made) ← \(value)")
    }

    @Test func aTagOfNoTypeMakesNoColumn() {
        var growth = SchemaGrowth(zoneName: "Z")
        growth.add(field: "empty", typeTag: "UNKNOWN_LIST", of: "Note")
        growth.add(field: "none", typeTag: "UNKNOWN", of: "Note")
        growth.add(field: "tags", typeTag: "STRING_LIST", of: "Note")
        #expect(growth.fields["Note"]?.map(\.name) == ["tags"])
    }
}
