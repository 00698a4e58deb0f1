import CloudKitModel
import Logging
import TestSupport
import Testing

@testable import ZoneFeed

/// The engine's behaviours against a scripted source and a destination in memory: no PostgreSQL,
/// no network.
@Suite struct RunnerTests {
    static func names(_ zone: String, _ count: Int) -> [String] { (1...count).map { "\(zone)-\($0)" } }

    func runner(
        _ source: ScriptedSource, _ destination: MemoryDestination, commitEvery: Int = 3,
        commitEveryBytes: Int = Runner.Configuration.defaultCommitEveryBytes, parallelZones: Int = 1, stall: FeedProgress.Limits = .init()
    ) -> Runner {
        Runner(
            configuration: .init(
                pipeline: "test", commitEvery: commitEvery, commitEveryBytes: commitEveryBytes, stall: stall, parallelZones: parallelZones),
            source: source, destination: destination, logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() })
    }

    @Test func aZonesPagesApplyInFeedOrderEachBatchWithTheTokenAfterIt() async throws {
        let source = ScriptedSource(feeds: ["A": Self.names("A", 10)], pageSize: 3)
        let destination = MemoryDestination()
        let summary = try await runner(source, destination, commitEvery: 5).run()

        #expect(summary.status == .succeeded)
        let applied = await destination.applied
        #expect(applied.map(\.token.value) == ["A@6", "A@10"], "two pages a batch: 6 records, then the last 4")
        #expect(applied.flatMap(\.recordNames) == Self.names("A", 10), "in feed order, each once")
        #expect(await destination.checkpoints[ZoneID(zoneName: "A")]?.token == ChangeToken("A@10"))
        #expect(source.fetches.map(\.token) == [nil, "A@3", "A@6", "A@9"], "each page from the token the one before ended with")
    }

    /// A run reports the time its own requests were throttled: `watch` keeps one source (one
    /// client) for all its cycles, and every cycle after a throttle reported the process's time
    /// since it started.
    @Test func aRunReportsTheThrottledTimeOfItsOwnRequests() async throws {
        let source = ScriptedSource(feeds: ["A": Self.names("A", 10)], pageSize: 3)
        source.throttledPerFetch = 2
        let destination = MemoryDestination()
        let first = try await runner(source, destination, commitEvery: 5).run()
        #expect(first.throttledSeconds == 8, "four fetches")
        source.append(Self.names("B", 2), to: "A")
        let second = try await runner(source, destination, commitEvery: 5).run()
        #expect(source.fetches.count == 5)
        #expect(second.throttledSeconds == 2, "its one fetch, not the source's 10 s")
    }

    /// A page of large records holds their bytes until its batch is written: a batch ends at
    /// the page that brings it to `commitEveryBytes`, before `commitEvery` records.
    @Test func aBatchOfLargeRecordsEndsAtItsBytesBeforeItsRecords() async throws {
        // Pages of 3 records of 100 KB: 300 KB a page; a batch of at least 700 KB is 3 pages.
        let source = ScriptedSource(feeds: ["A": Self.names("A", 20)], pageSize: 3, bytesPerRecord: 100_000)
        let destination = MemoryDestination()
        let summary = try await runner(source, destination, commitEvery: 1_000, commitEveryBytes: 700_000).run()

        #expect(summary.status == .succeeded)
        let applied = await destination.applied
        #expect(applied.map(\.token.value) == ["A@9", "A@18", "A@20"], "three pages a batch by their bytes, then the rest")
        #expect(applied.flatMap(\.recordNames) == Self.names("A", 20), "in feed order, each once")
    }

    /// With a connection to spare, a zone's next batch is written alongside its last; one that
    /// does not commit is applied again after the one before it: every batch once, in order.
    @Test func aBatchThatDidNotCommitAlongsideIsAppliedAgainAfterTheOneBeforeIt() async throws {
        let source = ScriptedSource(feeds: ["A": Self.names("A", 12)], pageSize: 3)
        let destination = MemoryDestination()
        destination.offerSpareConnections(failingFirst: 1)
        let summary = try await runner(source, destination).run()

        #expect(summary.status == .succeeded)
        #expect(destination.batchesWrittenAlongside >= 2, "the first failed, a later one was written alongside")
        #expect(destination.batchesCommittedAlongside >= 1, "and committed there")
        let applied = await destination.applied
        #expect(applied.map(\.token.value) == ["A@3", "A@6", "A@9", "A@12"], "each batch committed once, in feed order")
        #expect(applied.flatMap(\.recordNames) == Self.names("A", 12))
        #expect(summary.totals.upserts == 12)
    }

    /// When every batch written alongside fails (a spare connection that cannot connect), the
    /// zone gives up after three and writes one batch at a time.
    @Test func aZoneWhoseBatchesNeverCommitAlongsideWritesThemOneAtATime() async throws {
        let source = ScriptedSource(feeds: ["A": Self.names("A", 30)], pageSize: 3)
        let destination = MemoryDestination()
        destination.offerSpareConnections(failingFirst: .max)
        let summary = try await runner(source, destination).run()

        #expect(summary.status == .succeeded)
        // Three that failed, and at most one started before the third was seen to.
        #expect((3...4).contains(destination.batchesWrittenAlongside), "\(destination.batchesWrittenAlongside) of 9")
        #expect(destination.batchesCommittedAlongside == 0)
        let applied = await destination.applied
        #expect(applied.map(\.token.value) == (1...10).map { "A@\($0 * 3)" })
        #expect(applied.flatMap(\.recordNames) == Self.names("A", 30))
    }

    @Test func aNextRunStartsFromTheCheckpointAndAppliesOnlyWhatIsNew() async throws {
        let source = ScriptedSource(feeds: ["A": Self.names("A", 4)], pageSize: 3)
        let destination = MemoryDestination()
        _ = try await runner(source, destination).run()
        source.append(["A-5"], to: "A")
        let second = try await runner(source, destination).run()
        #expect(second.totals.upserts == 1)
        #expect(source.fetches.last?.token == "A@4")
        #expect(await destination.live(ZoneID(zoneName: "A")).count == 5)
    }

    @Test func aZoneThatRepeatsItsTokenWithNothingFailsInsteadOfLooping() async throws {
        let source = ScriptedSource(feeds: ["A": Self.names("A", 3), "B": Self.names("B", 3)], pageSize: 3)
        source.makeStuck("A")
        let destination = MemoryDestination()
        let summary = try await runner(source, destination).run()

        #expect(summary.status == .failed)
        #expect(summary.zonesFailed.map(\.0.zoneName) == ["A"])
        #expect(summary.zonesFailed.first?.1.contains("same token with no records") == true)
        let fetchesOfA = source.fetches.filter { $0.zone == "A" }.count
        #expect(
            (5...6).contains(fetchesOfA),
            "the first answer, then repeats until one more than FeedProgress's sameToken (3), then it stops; one more page may have been read ahead")
        #expect(await destination.live(ZoneID(zoneName: "B")).count == 3, "the other zone is applied")
    }

    /// `--zone café` names one zone: the one whose name is those bytes, not the one whose `é` is
    /// an `e` and a combining accent, which Swift takes for the same String and CloudKit for
    /// another zone (both were run).
    @Test func aZoneNamedOnTheCommandLineIsTheOneWithThoseBytes() {
        let (composed, decomposed) = ("caf\u{E9}", "cafe\u{301}")
        let zones = [ZoneID(zoneName: composed), ZoneID(zoneName: decomposed)]
        let (named, unknown) = Runner.zones(zones, named: [decomposed, "r\u{E9}sum\u{E9}"])
        #expect(named.map { Array($0.zoneName.utf8) } == [Array(decomposed.utf8)])
        #expect(unknown == ["r\u{E9}sum\u{E9}"])
    }

    /// Every way a feed can say "more is coming" and never get anywhere fails its zone within
    /// the documented number of pages; the other zone is applied whole.
    @Test(arguments: [
        (ScriptedSource.Stall.sameTokenSameRecords, 3, "with the token it was asked from"),
        (ScriptedSource.Stall.newTokensNoRecords, 100, "with no records"),
        (ScriptedSource.Stall.newTokensSameRecords, 3, "with the same 3 records"),
        // Two pages to give the tokens once, then more than three that give them again.
        (ScriptedSource.Stall.cyclingTokens, 5, "tokens it had given before"),
    ])
    func aFeedThatNeverAdvancesFailsItsZoneWithinItsLimit(stall: ScriptedSource.Stall, limit: Int, says: String) async throws {
        let source = ScriptedSource(feeds: ["A": Self.names("A", 5), "B": Self.names("B", 7)], pageSize: 3)
        source.makeStuck("A", stall)
        let destination = MemoryDestination()
        let summary = try await runner(source, destination).run()

        #expect(summary.status == .failed)
        #expect(summary.zonesFailed.map(\.0.zoneName) == ["A"])
        let message = summary.zonesFailed.first?.1 ?? ""
        #expect(message.contains("the feed does not advance") && message.contains(says), "\(message)")
        let fetchesOfA = source.fetches.filter { $0.zone == "A" }.count
        #expect((limit + 1...limit + 3).contains(fetchesOfA), "stops one page past its limit (\(limit)), or a read-ahead page later: \(fetchesOfA)")
        #expect(await destination.live(ZoneID(zoneName: "B")).count == 7, "the other zone is applied")
    }

    /// A deletion sweep's pages list names and hold no records: a server that lists the same
    /// names again and again, each time with a new position, is stopped as a feed that repeats
    /// its records is, where it went on for ever.
    @Test func aSweepThatListsTheSameNamesForEverIsStoppedWithinItsLimit() {
        var progress = FeedProgress(limits: .init())
        let zone = ZoneID(zoneName: "_defaultZone")
        var stopped: String?
        var pages = 0
        while stopped == nil, pages < 50 {
            pages += 1
            var page = ZoneChangePage(zoneID: zone, entries: [], syncToken: ChangeToken("sweep-\(pages)"), moreComing: true)
            page.listed = [ListedRecords(recordType: "Tag", names: ["r1", "r2"])]
            stopped = progress.note(page, fetchedFrom: ChangeToken("sweep-\(pages - 1)"))
        }
        #expect(pages == FeedProgress.Limits().repeatedPages + 2, "the first listing, then the repeats up to the limit and one more")
        #expect(stopped?.contains("the same 2 names listed") == true, "\(stopped ?? "")")

        // Names that move on are progress, however many pages.
        progress = FeedProgress(limits: .init())
        for i in 0..<50 {
            var page = ZoneChangePage(zoneID: zone, entries: [], syncToken: ChangeToken("on-\(i)"), moreComing: true)
            page.listed = [ListedRecords(recordType: "Tag", names: ["r\(i)"])]
            #expect(progress.note(page, fetchedFrom: ChangeToken("on-\(i - 1)")) == nil)
        }
    }

    /// A database feed that names a new zone on every page, for ever, is read for a bounded
    /// number of pages a run, and a bounded number of bytes of zone names (five names of five
    /// bytes here; 64 MiB unless told), which the run holds until it has fetched the zones: the
    /// zones those pages named are applied, the run succeeds, and the next run reads on from the
    /// last page's token.
    @Test(arguments: [FeedProgress.Limits(databasePages: 5), FeedProgress.Limits(databaseNameBytes: 25)])
    func aDatabaseFeedWithoutEndIsReadABoundedNumberOfPagesARun(limits: FeedProgress.Limits) async throws {
        let source = ScriptedSource(feeds: ["A": Self.names("A", 4)], pageSize: 3)
        source.makeDatabaseFeedEndless()
        let destination = MemoryDestination()
        let first = try await runner(source, destination, stall: limits).run()
        #expect(first.status == .succeeded, "\(first.error ?? "")")
        #expect(source.databaseFetches == [nil, "db-endless@1", "db-endless@2", "db-endless@3", "db-endless@4"])
        #expect(Set(first.zonesUpToDate.map(\.zoneName)) == Set((1...5).map { "new-\($0)" }))

        let second = try await runner(source, destination, stall: limits).run()
        #expect(second.status == .succeeded)
        #expect(source.databaseFetches.dropFirst(5).first == "db-endless@5", "the next run reads on from the last page")
        #expect(source.databaseFetches.count == 10)
    }

    @Test func anExpiredTokenResyncsTheZoneAndSweepsWhatIsGone() async throws {
        let source = ScriptedSource(feeds: ["A": Self.names("A", 6)], pageSize: 3)
        let destination = MemoryDestination()
        _ = try await runner(source, destination).run()
        // The server forgets two records and the zone's token.
        source.replace("A", with: Self.names("A", 4))
        source.expire("A@6")
        let resync = try await runner(source, destination).run()

        let zone = ZoneID(zoneName: "A")
        #expect(resync.status == .succeeded)
        #expect(await destination.checkpoints[zone]?.generation == 2)
        #expect(await destination.checkpoints[zone]?.resyncing == false)
        #expect(await destination.live(zone) == Set(["A-1", "A-2", "A-3", "A-4"]), "A-5 and A-6 were swept")
        #expect(resync.totals.swept == 2)
    }

    @Test func aZoneTheServerNoLongerKnowsIsDeleted() async throws {
        let source = ScriptedSource(feeds: ["A": Self.names("A", 3)], pageSize: 3)
        let destination = MemoryDestination()
        _ = try await runner(source, destination).run()
        source.lose("A")
        source.append(["A-4"], to: "A")
        let summary = try await runner(source, destination).run()
        #expect(summary.zonesDeleted.map(\.zoneID.zoneName) == ["A"])
        #expect(await destination.live(ZoneID(zoneName: "A")).isEmpty)
        #expect(await destination.checkpoints[ZoneID(zoneName: "A")] == nil)
    }

    @Test func aCancelledRunStopsBetweenBatchesAndTheNextRunResumes() async throws {
        let source = ScriptedSource(feeds: ["A": Self.names("A", 30)], pageSize: 3)
        let destination = MemoryDestination()
        let runner = runner(source, destination)
        // The second batch waits, once applied, until the run has been cancelled.
        let (reached, reachedSecond) = AsyncStream.makeStream(of: Void.self)
        let (released, release) = AsyncStream.makeStream(of: Void.self)
        await destination.onEachBatch { count in
            guard count == 2 else { return }
            reachedSecond.yield()
            for await _ in released { break }
        }
        let run = Task { try await runner.run() }
        for await _ in reached { break }
        run.cancel()
        release.yield()
        let error = await #expect(throws: RunError.self) { try await run.value }
        #expect(error?.kind == .interrupted)

        let zone = ZoneID(zoneName: "A")
        let applied = await destination.applied
        #expect(applied.count < 10, "it stopped early")
        #expect(await destination.checkpoints[zone]?.token == applied.last?.token, "the checkpoint is the last batch committed")
        #expect(await destination.live(zone) == Set(applied.flatMap(\.recordNames)), "no batch half applied")

        await destination.onEachBatch { _ in }
        let next = try await self.runner(source, destination).run()
        #expect(next.status == .succeeded)
        #expect(await destination.live(zone) == Set(Self.names("A", 30)))
        #expect(await destination.applied.flatMap(\.recordNames) == Self.names("A", 30), "nothing applied twice")
    }

    @Test func aZoneHeldByAnotherRunIsSkippedAndSaidSo() async throws {
        let source = ScriptedSource(feeds: ["A": Self.names("A", 3), "B": Self.names("B", 3)], pageSize: 3)
        let destination = MemoryDestination()
        await destination.holdElsewhere(ZoneID(zoneName: "A"))
        let summary = try await runner(source, destination, parallelZones: 2).run()
        #expect(summary.zonesClaimedElsewhere.map(\.zoneName) == ["A"])
        #expect(summary.zonesApplied.map(\.zoneName) == ["B"])
    }
}
