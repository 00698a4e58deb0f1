import CloudKitModel
import Testing

/// Names are told apart by their bytes, as CloudKit and PostgreSQL tell them apart: `café` with a
/// composed é and `cafe` with a combining accent are one String to Swift, and two records, two
/// zones, two rows everywhere else.
struct ExactNameTests {
    let composed = "caf\u{E9}"
    let decomposed = "cafe\u{301}"

    @Test func namesOfOneStringAndTwoSpellingsAreTwoNames() {
        #expect(composed == decomposed, "Swift's equality is canonical equivalence")
        #expect(ExactName(composed) != ExactName(decomposed))
        #expect(Set([ExactName(composed), ExactName(decomposed), ExactName("caf\u{E9}")]).count == 2)
        #expect(ExactName(composed) == ExactName(String(decoding: Array(composed.utf8), as: UTF8.self)))
    }

    @Test func zonesOfOneStringAndTwoSpellingsAreTwoZonesWhateverTheirType() {
        #expect(ZoneID(zoneName: composed) != ZoneID(zoneName: decomposed))
        #expect(ZoneID(zoneName: "Z", ownerRecordName: composed) != ZoneID(zoneName: "Z", ownerRecordName: decomposed))
        #expect(Set([ZoneID(zoneName: composed), ZoneID(zoneName: decomposed)]).count == 2)
        #expect(ZoneID(zoneName: composed, zoneType: "REGULAR_CUSTOM_ZONE") == ZoneID(zoneName: composed), "the type does not make another zone")
    }
}
