import Testing

@testable import CloudKitModel

/// A body is gathered part by part, appended or written into the gatherer's room; either way
/// the page holds every byte once, in order, however often the memory had to grow.
struct GathererTests {
    @Test func whatIsWrittenIntoTheRoomAndCommittedIsGatheredInOrderWithAppendedParts() {
        let gatherer = JSONBytes.Gatherer(memory: PageMemory(mostKept: 0))
        var expected: [UInt8] = []
        for round in 0..<40 {
            // A few bytes into the room, some of them left uncommitted, then a larger part
            // appended: rooms and appends alternate across many growths of the memory.
            let room = gatherer.room(atLeast: 3)
            #expect(room.count >= 3)
            let byte = UInt8(truncatingIfNeeded: round)
            room[0] = byte
            room[1] = byte &+ 1
            room[2] = 0xFF  // written, never committed: the next part overwrites it
            gatherer.commit(2)
            expected += [byte, byte &+ 1]
            let part = [UInt8](repeating: byte, count: 1_000 * round)
            part.withUnsafeBytes { gatherer.append($0) }
            expected += part
        }
        #expect(gatherer.count == expected.count)
        let page = gatherer.finish()
        #expect(Array(page.buffer) == expected)
    }

    @Test func aNewGathererGivesARoomEvenOfNoBytes() {
        let gatherer = JSONBytes.Gatherer(memory: PageMemory(mostKept: 0))
        #expect(gatherer.room(atLeast: 0).count > 0)
        gatherer.commit(0)
        #expect(gatherer.finish().buffer.isEmpty)
    }

    @Test func aRoomLargerThanWhatIsLeftGrowsTheMemoryAndKeepsWhatWasGathered() {
        let gatherer = JSONBytes.Gatherer(memory: PageMemory(mostKept: 0))
        gatherer.reserveCapacity(100)
        let first = gatherer.room(atLeast: 10)
        for i in 0..<10 { first[i] = UInt8(i) }
        gatherer.commit(10)
        let large = gatherer.room(atLeast: 200_000)
        #expect(large.count >= 200_000)
        large.initializeMemory(as: UInt8.self, repeating: 7)
        gatherer.commit(200_000)
        let page = gatherer.finish()
        #expect(Array(page.buffer.prefix(10)) == Array(0..<10))
        #expect(page.buffer.count == 200_010 && page.buffer.dropFirst(10).allSatisfy { $0 == 7 })
    }
}
