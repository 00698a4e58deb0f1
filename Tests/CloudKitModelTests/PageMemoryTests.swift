import Testing

@testable import CloudKitModel

/// A page's memory, given back when the page is freed, is handed out again for a later page of
/// about its size, so that the next page is not written into fresh memory; the pool keeps no
/// more than it may, and neither small buffers nor ones far larger than a page asks for.
struct PageMemoryTests {
    static let page = 330_000

    @Test func aPagesMemoryServesTheNextPageOfAboutItsSize() {
        let memory = PageMemory(mostKept: 4 << 20)
        let first = memory.take(atLeast: Self.page)
        #expect(first.count >= Self.page && first.count % PageMemory.smallest == 0, "rounded up to 64 KiB: \(first.count)")
        memory.giveBack(first)
        #expect(memory.keptBytes == first.count)
        // A page a little smaller or larger, within what the buffer holds.
        let second = memory.take(atLeast: Self.page - 20_000)
        #expect(second.baseAddress == first.baseAddress, "the same memory again")
        #expect(memory.keptBytes == 0)
        let third = memory.take(atLeast: Self.page)
        #expect(third.baseAddress != second.baseAddress, "memory in use is not handed out twice")
        memory.giveBack(second)
        memory.giveBack(third)
        #expect(memory.keptBytes == second.count + third.count)
    }

    @Test func aBufferIsNotSpentOnAPageMoreThanTwiceSmallerNorOneLarger() {
        let memory = PageMemory(mostKept: 4 << 20)
        let large = memory.take(atLeast: 1 << 20)
        memory.giveBack(large)
        let small = memory.take(atLeast: 300_000)
        #expect(small.baseAddress != large.baseAddress && small.count < large.count, "\(small.count)")
        let larger = memory.take(atLeast: (1 << 20) + 1)
        #expect(larger.baseAddress != large.baseAddress)
        #expect(memory.keptBytes == large.count, "still kept for a page of its size")
        memory.giveBack(small)
        memory.giveBack(larger)
        // The closest fit of those kept.
        let fit = memory.take(atLeast: 600_000)
        #expect(fit.baseAddress == large.baseAddress)
        memory.giveBack(fit)
    }

    @Test func thePoolKeepsNoMoreThanItsBoundAndNoSmallBuffers() {
        let memory = PageMemory(mostKept: 1 << 20)
        let buffers = (0..<8).map { _ in memory.take(atLeast: Self.page) }
        for buffer in buffers { memory.giveBack(buffer) }
        #expect(memory.keptBytes <= 1 << 20)
        #expect(memory.keptBytes >= (1 << 20) - buffers[0].count, "as many as fit")
        let small = memory.take(atLeast: 1_000)
        #expect(small.count == 1_000)
        let kept = memory.keptBytes
        memory.giveBack(small)
        #expect(memory.keptBytes == kept, "freed, not kept")
    }

    /// When no page is coming for a while, what is kept is freed, and the pool serves pages
    /// again afterwards.
    @Test func releasingFreesWhatIsKeptAndThePoolGoesOn() {
        let memory = PageMemory(mostKept: 4 << 20)
        let buffers = (0..<3).map { _ in memory.take(atLeast: Self.page) }
        let inUse = memory.take(atLeast: Self.page)
        for buffer in buffers { memory.giveBack(buffer) }
        #expect(memory.releaseKept() == 3 * buffers[0].count)
        #expect(memory.keptBytes == 0)
        #expect(memory.releaseKept() == 0, "nothing is kept twice")
        // A buffer in use when the pool was emptied comes back, and is kept as any.
        memory.giveBack(inUse)
        #expect(memory.keptBytes == inUse.count)
        let again = memory.take(atLeast: Self.page)
        #expect(again.baseAddress == inUse.baseAddress)
        memory.giveBack(again)
    }

    /// A body gathered part by part, then freed: its memory goes back to the pool, and the next
    /// body of its size is gathered into it; a page copied in takes it too.
    @Test func aGatheredPageGivesItsMemoryToTheNext() {
        let memory = PageMemory(mostKept: 4 << 20)
        let body = [UInt8](repeating: UInt8(ascii: "x"), count: Self.page)
        func gathered() -> JSONBytes {
            let gatherer = JSONBytes.Gatherer(memory: memory)
            gatherer.reserveCapacity(body.count)
            body.withUnsafeBytes { gatherer.append($0) }
            return gatherer.finish()
        }
        var first: JSONBytes? = gathered()
        let address = first!.buffer.baseAddress
        #expect(first!.buffer.elementsEqual(body))
        #expect(memory.keptBytes == 0)
        first = nil
        #expect(memory.keptBytes >= body.count, "given back with the page")
        var next: JSONBytes? = gathered()
        #expect(next!.buffer.baseAddress == address && next!.buffer.elementsEqual(body))
        next = nil
        let copied = body.withUnsafeBytes { JSONBytes(copying: $0, memory: memory) }
        #expect(copied.buffer.baseAddress == address && copied.buffer.elementsEqual(body))
    }

    /// The index of a page's kept fields is in blocks of the page's memory too, given back with
    /// the page and taken again by the next: blocks from the allocator went back to the system
    /// when the heaps were trimmed (`FreedMemory`), and were faulted in again for later pages.
    @Test func aPagesIndexOfFieldsGoesBackWithThePageAndServesTheNext() throws {
        let memory = PageMemory(mostKept: 4 << 20)
        // 200 records of 20 fields: 4,000 entries of 40 bytes, three blocks of the index.
        var text = "["
        var offsets: [Int] = []
        for i in 0..<200 {
            if i > 0 { text += "," }
            offsets.append(text.utf8.count)
            text += KeptFieldsIndexTests.fieldsObject("f", count: 20)
        }
        text += "]"
        func read() throws -> (JSONBytes, [RecordFields]) {
            let page = Array(text.utf8).withUnsafeBytes { JSONBytes(copying: $0, memory: memory) }
            return (page, try RecordFields.read(from: page, at: offsets))
        }
        var first: (JSONBytes, [RecordFields])? = try read()
        #expect(first!.1.allSatisfy { if case .json(let raw) = $0 { raw.fields.count == 20 } else { false } })
        #expect(memory.keptBytes == 0)
        first = nil
        #expect(
            memory.keptBytes >= text.utf8.count + 3 * PageMemory.smallest,
            "the page's bytes and its index's three blocks: \(memory.keptBytes) bytes kept")
        let next = try read()
        #expect(memory.keptBytes == 0, "the next page's bytes and index take them again")
        withExtendedLifetime(next) {}
    }
}
