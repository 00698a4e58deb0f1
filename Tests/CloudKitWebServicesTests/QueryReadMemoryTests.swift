import Foundation
import Testing
import ZoneFeed

@testable import ZoneFeedCloudKit

/// What a query zone's reader remembers holds only along the pages the engine commits.
@Suite struct QueryReadMemoryTests {
    let key = QueryReadMemory.Key(kind: .pass, type: "Score", from: 1_000)

    @Test func deletionsGivenToPagesThatWereNotCommittedAreGivenAgain() {
        let memory = QueryReadMemory()
        memory.beginPage(after: ChangeToken("t0"), atRest: true)
        memory.noteDeletion("A")
        #expect(memory.takeDeletions() == ["A"])
        memory.gave(ChangeToken("t1"), carrying: ["A"])
        memory.beginPage(after: ChangeToken("t1"), atRest: false)
        memory.noteDeletion("B")
        #expect(memory.takeDeletions() == ["B"])
        memory.gave(ChangeToken("t2"), carrying: ["B"])

        // The run failed after committing t1: B, given to the page after it, comes again; A,
        // committed with t1, does not.
        memory.beginPage(after: ChangeToken("t1"), atRest: false)
        #expect(memory.takeDeletions() == ["B"])
    }

    @Test func aNewChainFromTheStartGivesEveryCarriedDeletionAgainAndForgetsTies() {
        let memory = QueryReadMemory()
        memory.beginPage(after: nil, atRest: true)
        memory.noteDeletion("A")
        _ = memory.takeDeletions()
        memory.put(key, ["R1", "R2"])
        memory.gave(ChangeToken("t1"), carrying: ["A"])
        memory.beginPage(after: ChangeToken("t0-committed-before"), atRest: false)
        #expect(memory.takeDeletions() == ["A"])
        #expect(memory.take(key) == [], "records read at a slice's start by a page never applied are read again")
    }

    @Test func aRunThatEndedCommittedWhatItCarried() {
        let memory = QueryReadMemory()
        memory.beginPage(after: nil, atRest: true)
        memory.noteDeletion("A")
        _ = memory.takeDeletions()
        memory.gave(ChangeToken("end"), carrying: ["A"])
        // The next run starts from the last token given, at rest: nothing to give again.
        memory.beginPage(after: ChangeToken("end"), atRest: true)
        memory.gave(ChangeToken("next"), carrying: [])
        memory.beginPage(after: ChangeToken("elsewhere"), atRest: false)
        #expect(memory.takeDeletions() == [])
    }

    @Test func aVersionOfARecordDeletedByNotificationIsHeldBackUnlessItIsNew() {
        let memory = QueryReadMemory()
        memory.noteDeletion("A")
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        #expect(memory.isDeleted("A", modifiedMs: now - 3_600_000), "an hour-old version the index still shows")
        #expect(!memory.isDeleted("A", modifiedMs: now + 1_000), "a re-creation")
        #expect(!memory.isDeleted("B", modifiedMs: now - 3_600_000))
    }
}
