import CloudKitModel
import Synchronization
import Testing
import ZoneFeed

/// `zonePages(in:since:readingAhead:)`: how far the fetching runs ahead of the engine, and that it
/// stops when the engine stops reading. Each fetch records how many reads the engine had begun,
/// so the bound is checked at every fetch, whenever it happens, rather than over a waited-out
/// moment.
@Suite struct ZoneChangeFeedTests {
    let zone = ZoneID(zoneName: "Notes")

    /// Reads three pages of `source` (whose fetch number `3 + ahead` hangs) and goes away: at
    /// most `ahead` pages were fetched ahead of the reader at any fetch, the fetch under way is
    /// cancelled and nothing is fetched after.
    private func expectReadAhead(of source: WatchedFeed, atMost ahead: Int, _ pages: ZonePages) async throws {
        var events = source.events.makeAsyncIterator()
        do {
            var iterator = pages.makeAsyncIterator()
            for read in 1...3 {
                source.beginRead()
                let page = try #require(try await iterator.next())
                #expect(page.syncToken == ChangeToken("t\(read)"), "the pages come in order")
            }
            // Three read and `ahead` waiting: the next fetch is under way (and hangs).
            while case .fetchStarted(let n)? = await events.next(), n < 3 + ahead {}
        }
        // The reader went away: the fetch under way is cancelled.
        #expect(await events.next() == .cancelled)
        let fetches = source.readsBegunAtEachFetch
        #expect(fetches.count == 3 + ahead, "nothing was fetched after the reader went away: \(fetches)")
        for (index, readsBegun) in fetches.enumerated() {
            // Fetch k starts only once the reader has asked for page k - ahead.
            #expect(readsBegun >= index + 1 - ahead, "fetch \(index + 1) started with \(readsBegun) reads begun: \(fetches)")
        }
    }

    // A fetch that is never cancelled would hang these tests: the limit makes that a failure.
    @Test(.timeLimit(.minutes(1))) func theReadAheadIsBoundedAndStopsWhenTheReaderGoesAway() async throws {
        // Two pages at most wait in the buffer while a third is fetched.
        let source = WatchedFeed(hangingFetch: 5)
        try await expectReadAhead(of: source, atMost: 2, source.zonePages(in: zone, since: nil, readingAhead: 2))
    }

    /// Pages of large records are fetched ahead only while those waiting take fewer bytes than
    /// told, however many pages the read-ahead allows.
    @Test(.timeLimit(.minutes(1))) func theReadAheadStopsAtItsBytesBeforeItsPages() async throws {
        // Three pages of 10 MB reach 25 MB, where ten pages ahead would have let six go at once.
        let source = WatchedFeed(hangingFetch: 6, bytesPerPage: 10_000_000)
        try await expectReadAhead(of: source, atMost: 3, source.zonePages(in: zone, since: nil, readingAhead: 10, bytes: 25_000_000))
    }

    /// The engine stopped (a run interrupted): the reader's task is cancelled while it waits for a
    /// page, and the fetch it waits for is cancelled with it.
    @Test(.timeLimit(.minutes(1))) func aCancelledReaderCancelsTheFetchItWaitsFor() async throws {
        let source = WatchedFeed(hangingFetch: 1)
        var events = source.events.makeAsyncIterator()
        let zone = self.zone
        let reader = Task {
            var pages = source.zonePages(in: zone, since: nil, readingAhead: 2).makeAsyncIterator()
            source.beginRead()
            return try await pages.next()
        }
        #expect(await events.next() == .fetchStarted(1))
        reader.cancel()
        #expect(await events.next() == .cancelled)
        await #expect(throws: CancellationError.self) { try await reader.value }
    }
}

/// One zone of endless pages whose fetches the test watches: how many reads the engine had begun
/// when each fetch started, and the fetch left hanging until it is cancelled.
private final class WatchedFeed: ChangeSource {
    enum Event: Equatable, Sendable {
        case fetchStarted(Int)
        case cancelled
    }

    private let hangingFetch: Int
    private let bytesPerPage: Int
    private let reads = Mutex<(begun: Int, atEachFetch: [Int])>((0, []))
    let events: AsyncStream<Event>
    private let continuation: AsyncStream<Event>.Continuation

    init(hangingFetch: Int, bytesPerPage: Int = 0) {
        self.hangingFetch = hangingFetch
        self.bytesPerPage = bytesPerPage
        (events, continuation) = AsyncStream.makeStream()
    }

    /// The engine is about to ask for the next page.
    func beginRead() { reads.withLock { $0.begun += 1 } }

    var readsBegunAtEachFetch: [Int] { reads.withLock { $0.atEachFetch } }

    func currentUser() async throws -> String? { nil }
    var namedZones: [ZoneID]? { nil }

    func fetchDatabaseChanges(since token: ChangeToken?) async throws -> DatabaseChangePage {
        DatabaseChangePage(modifiedZones: [], deletedZones: [], syncToken: ChangeToken("db"), moreComing: false)
    }

    func fetchZoneChanges(in zone: ZoneID, since token: ChangeToken?) async throws -> ZoneChangePage {
        let n = reads.withLock { reads in
            reads.atEachFetch.append(reads.begun)
            return reads.atEachFetch.count
        }
        continuation.yield(.fetchStarted(n))
        if n == hangingFetch {
            // This fetch ends only when its task is cancelled: a stream that never yields, whose
            // iteration ends with the task's cancellation.
            let (never, open) = AsyncStream.makeStream(of: Never.self)
            for await _ in never {}
            withExtendedLifetime(open) {}
            continuation.yield(.cancelled)
            throw CancellationError()
        }
        var page = ZoneChangePage(zoneID: zone, entries: [], syncToken: ChangeToken("t\(n)"), moreComing: true)
        page.byteCount = bytesPerPage
        return page
    }
}
