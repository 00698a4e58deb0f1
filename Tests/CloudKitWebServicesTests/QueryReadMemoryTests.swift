import CloudKitModel
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

    /// A run of ties read by marker keeps every name it gave, up to `maxTies`; past it, the
    /// last page's alone, so that an endless run at one time holds a bounded memory.
    @Test func theNamesGivenAtOneTimeAreBounded() {
        let memory = QueryReadMemory(maxTies: 4)
        memory.put(key, seen: [], adding: ["R1", "R2"])
        memory.put(key, seen: memory.take(key), adding: ["R3", "R4"])
        #expect(memory.take(key) == ["R1", "R2", "R3", "R4"])
        memory.put(key, seen: ["R1", "R2", "R3", "R4"], adding: ["R5", "R6"])
        #expect(memory.take(key) == ["R5", "R6"], "past the bound, the last page's")
        memory.put(key, seen: [], adding: (1...6).map { ExactName("P\($0)") })
        #expect(memory.take(key) == ["P3", "P4", "P5", "P6"], "a page past the bound keeps its last names")
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
