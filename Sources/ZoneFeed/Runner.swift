import CloudKitModel
import Foundation
import Logging

/// Drives one run: discovers zones, then for each zone claims it, reads its checkpoint and
/// applies its pages in batches of whole pages until `moreComing` is false. Zones are worked on
/// `zonesAtOnce` at a time: as many as the destination writes with (`parallelZones`), or more when
/// the source is far away and wants many requests in flight (`ChangeSource.concurrentZones`).
/// Events are delivered one at a time to `events`. Cancellation
/// (SIGINT, SIGTERM) stops between batches: a batch is either committed with its token or not at
/// all.
public struct Runner: Sendable {
    public struct Configuration: Sendable {
        public var pipeline: String
        /// Records per transaction (whole pages only). Empty pages are not counted as applied.
        public var commitEvery: Int
        /// Bytes of pages per transaction, as they came (whole pages only): a batch ends at the
        /// page that brings it to this many, however few records it holds, so that a zone of
        /// large records does not hold `commitEvery` of them in memory at once.
        public var commitEveryBytes: Int
        /// Only these zone names, when not empty (`--zone`).
        public var zoneFilter: [String]
        /// How long a zone's feed may fail to advance before the zone fails (`FeedProgress`).
        public var stall: FeedProgress.Limits
        /// How many zones the destination applies at once (its connections); it takes more zones
        /// than that, sharing its connections among them.
        public var parallelZones: Int
        /// Only the zones of this share, when set (`--shard`).
        public var shard: ZoneShard?

        public init(
            pipeline: String, commitEvery: Int, commitEveryBytes: Int = Configuration.defaultCommitEveryBytes, zoneFilter: [String] = [],
            stall: FeedProgress.Limits = .init(), parallelZones: Int = 1, shard: ZoneShard? = nil
        ) {
            self.pipeline = pipeline
            self.commitEvery = commitEvery
            self.commitEveryBytes = commitEveryBytes
            self.zoneFilter = zoneFilter
            self.stall = stall
            self.parallelZones = parallelZones
            self.shard = shard
        }

        /// 16 MiB: about 10,000 records of the bench's 1.66 KB, twice the default `commitEvery`,
        /// so that only large records are committed sooner. A zone of 3,000 records of 150 KB (30
        /// MB pages) peaked at 139 MB resident so, at 228 MB with 32 MiB, and at 491 MB with
        /// `commitEvery` alone (one batch of everything); a batch is a page at least.
        public static let defaultCommitEveryBytes = 16 * 1024 * 1024
    }

    public let configuration: Configuration
    public let source: any ChangeSource
    public let destination: any Destination
    public let logger: Logger
    public let events: SyncEventHandler
    /// Whether a zone's next batch is fetched while its last one is written; otherwise a single
    /// page is. Zones fetched in parallel do without when there are no more of them than
    /// connections: the other zones keep the source and the destination busy meanwhile, and each
    /// zone then holds one batch in memory instead of two (until a zone is left alone on the
    /// destination and writes two batches at once, `BatchesInFlight`).
    var fetchesAhead = true
    /// Records per batch of one zone: `commitEvery`, or less when more zones are fetched at once
    /// than the destination writes, so that the batches held in memory add up to about
    /// `commitEvery` per connection.
    var batchRecords: Int
    /// Bytes of pages per batch of one zone: `commitEveryBytes`, or less in the same measure as
    /// `batchRecords`.
    var batchBytes: Int

    /// How many zones are fetched at once.
    public var zonesAtOnce: Int { max(configuration.parallelZones, source.concurrentZones ?? 1, 1) }

    public init(
        configuration: Configuration, source: any ChangeSource, destination: any Destination,
        logger: Logger, events: @escaping SyncEventHandler = { _ in }
    ) {
        self.configuration = configuration
        self.source = source
        self.destination = destination
        self.logger = logger
        self.events = events
        batchRecords = configuration.commitEvery
        batchBytes = configuration.commitEveryBytes
    }

    /// Runs to the end and returns the summary; the run is recorded in the destination whatever
    /// happens. Throws `RunError` only for failures that stop the whole run.
    public func run() async throws -> RunSummary {
        try await destination.prepare()
        let runID = try await destination.startRun()
        var logger = self.logger
        logger[metadataKey: "run"] = "\(runID)"
        let started = ContinuousClock.now
        var summary = RunSummary(runID: runID, pipeline: configuration.pipeline, status: .running)
        // The source's count is its life's (`watch` keeps one source for every cycle): the run's
        // is what it adds from here.
        let throttledBefore = await source.throttledSeconds()
        await events(.willFetchChanges(runID: runID))

        do {
            try await checkAccount(logger: logger)
            let zones = try await zonesToFetch(runID: runID, summary: &summary, logger: logger)
            if zonesAtOnce > 1 && zones.count > 1 {
                try await fetchInParallel(zones, runID: runID, summary: &summary, logger: logger)
            } else {
                for zone in zones {
                    try Task.checkCancellation()
                    try await fetchZone(zone, runID: runID, summary: &summary, logger: logger)
                }
            }
            summary.status = summary.zonesFailed.isEmpty && summary.databaseFeedFailed == nil ? .succeeded : .failed
            if summary.status == .failed {
                let failures = (summary.databaseFeedFailed.map { [$0] } ?? []) + summary.zonesFailed.map { "zone \(Self.shown($0.0)): \($0.1)" }
                summary.error = failures.joined(separator: "; ")
            }
        } catch {
            summary.status = Self.isCancellation(error) ? .interrupted : .failed
            summary.error = summary.status == .interrupted ? "interrupted" : "\(error)"
            summary.seconds = (ContinuousClock.now - started).seconds
            await finish(&summary, throttledBefore: throttledBefore, logger: logger)
            if summary.status == .interrupted { throw RunError(.interrupted, summary: summary, message: "the run was interrupted") }
            if let runError = error as? RunError { throw RunError(runError.kind, summary: summary, message: runError.message) }
            if let sourceError = error as? SyncError, sourceError.code == .authenticationRequired {
                throw RunError(.authentication, summary: summary, message: sourceError.message)
            }
            throw RunError(.failed, summary: summary, message: "\(error)")
        }
        summary.seconds = (ContinuousClock.now - started).seconds
        await finish(&summary, throttledBefore: throttledBefore, logger: logger)
        return summary
    }

    private func finish(_ summary: inout RunSummary, throttledBefore: Double, logger: Logger) async {
        summary.throttledSeconds = max(0, await source.throttledSeconds() - throttledBefore)
        do {
            try await destination.finishRun(
                summary.runID, status: summary.status, error: summary.error, throttledSeconds: summary.throttledSeconds)
        } catch {
            logger.error("could not record the end of the run", metadata: ["error": "\(error)"])
        }
        await events(.didFetchChanges(summary))
    }

    static func isCancellation(_ error: any Error) -> Bool {
        error is CancellationError || Task.isCancelled
    }

    // MARK: Account

    /// The sync engine's `switchAccounts`: tokens of one account must never be used for another.
    private func checkAccount(logger: Logger) async throws {
        guard let user = try await source.currentUser() else { return }
        if let stored = try await destination.storedAccount() {
            guard stored == user else {
                throw RunError(
                    .accountChanged, summary: nil,
                    message: "the credentials belong to user \(user), but this pipeline's checkpoints belong to \(stored); "
                        + "use a web auth token of the original account, or, to export this account instead, give the pipeline a new name "
                        + "(checkpoints are kept per pipeline name) so that it starts from the beginning")
            }
        } else {
            try await destination.storeAccount(user)
            logger.info("recorded the account for this pipeline", metadata: ["user": "\(user)"])
        }
    }

    // MARK: Zones

    /// A zone's name as the run's error and its log name it: quoted and cut when it is longer
    /// than a name to recognise (a server's zone name too long to keep could be megabytes).
    static func shown(_ zone: ZoneID) -> String {
        zone.zoneName.unicodeScalars.count > InertText.quotedLength ? InertText.quoted(zone.zoneName) : zone.zoneName
    }

    private func zonesToFetch(runID: Int64, summary: inout RunSummary, logger: Logger) async throws -> [ZoneID] {
        var zones: [ZoneID]
        var refused: [RefusedZone] = []
        if let named = source.namedZones {
            zones = named.filter { zone in
                guard let reason = destination.refusal(of: zone) else { return true }
                refused.append(RefusedZone(zoneID: zone, reason: reason))
                return false
            }
        } else {
            var token = try await destination.databaseCheckpoint()
            var fetchToken = token
            var modified: [ZoneID] = []
            var deleted: [ZoneDeletion] = []
            var progress = FeedProgress(limits: configuration.stall)
            var pagesRead = 0
            var nameBytes = 0
            while true {
                try Task.checkCancellation()
                var page: DatabaseChangePage
                do {
                    page = try await source.fetchDatabaseChanges(since: fetchToken)
                } catch let error as SyncError where error.code == .changeTokenExpired && fetchToken != nil {
                    // Rediscover every zone from the beginning of the database feed; the zones
                    // keep their own tokens, so nothing is refetched that need not be. That feed
                    // names live zones only, so every zone followed so far is fetched too: one
                    // deleted meanwhile is found so (the server no longer knows it), where it
                    // would otherwise keep its rows live and its checkpoint for ever.
                    logger.warning("the database change token is no longer accepted; rediscovering zones", metadata: ["error": "\(error.message)"])
                    try await destination.markEveryZonePending()
                    fetchToken = nil
                    continue
                }
                if let stuck = progress.note(page) {
                    // The pages before that named zones were applied with their tokens, and the
                    // zones are fetched; the run fails at the end with the reason.
                    logger.error("the database change feed does not advance", metadata: ["error": "\(stuck)"])
                    summary.databaseFeedFailed = stuck
                    break
                }
                let namesZones = !page.modifiedZones.isEmpty || !page.deletedZones.isEmpty || !page.refusedZones.isEmpty
                nameBytes +=
                    page.modifiedZones.reduce(0) { $0 + $1.zoneName.utf8.count } + page.deletedZones.reduce(0) { $0 + $1.zoneID.zoneName.utf8.count }
                    + page.refusedZones.reduce(0) { $0 + $1.zoneID.zoneName.utf8.count }
                // A zone the destination cannot keep under its name is not followed (and was
                // never stored, so its deletion changes nothing): it fails, loudly, instead of
                // landing on another zone's rows.
                refused += page.refusedZones
                for zone in page.modifiedZones {
                    if let reason = destination.refusal(of: zone) { refused.append(RefusedZone(zoneID: zone, reason: reason)) }
                }
                page.modifiedZones.removeAll { destination.refusal(of: $0) != nil }
                page.deletedZones.removeAll { destination.refusal(of: $0.zoneID) != nil }
                // Deletions are applied in the transaction that stores the database token, so a
                // crash can never advance the token past a deletion that was not applied. A page
                // that names no zone while more are said to be coming changes nothing: its token
                // is stored with the next page that does (or the last), so that a feed given up
                // on part way is read again from before its empty pages, which a server could
                // have answered with a token past zones it never named.
                if namesZones || !page.moreComing {
                    guard let outcome = try await destination.applyDatabaseChanges(page, after: token, runID: runID) else {
                        logger.info("another run moved the database change feed on; using its zones")
                        break
                    }
                    summary.totals += outcome
                    summary.zonesDeleted += page.deletedZones
                    await events(.appliedDatabaseChanges(outcome))
                    await events(.stateUpdate(nil, page.syncToken))
                    modified += page.modifiedZones
                    deleted += page.deletedZones
                    token = page.syncToken
                }
                if !page.moreComing || page.syncToken == fetchToken { break }
                pagesRead += 1
                if pagesRead >= configuration.stall.databasePages || nameBytes >= configuration.stall.databaseNameBytes {
                    logger.notice(
                        "the database change feed says more is coming after the pages one run reads; the zones they named are fetched, and the next run reads on",
                        metadata: ["pages": "\(pagesRead)", "zoneNameBytes": "\(nameBytes)"])
                    break
                }
                fetchToken = page.syncToken
            }
            await events(.fetchedDatabaseChanges(modified: modified, deleted: deleted))
            for deletion in deleted {
                if deletion.reason == .encryptedDataReset {
                    await events(.resyncStarted(deletion.zoneID, reason: "encrypted data reset"))
                } else {
                    await events(.zoneDeleted(deletion, outcome: BatchOutcome()))
                }
            }
            // Pending zones include those a crashed run left unfinished.
            zones = try await destination.pendingZones()
        }
        // A zone no table can hold is reported by the share it belongs to, not by every one.
        if let shard = configuration.shard { refused = refused.filter { shard.holds($0.zoneID) } }
        for zone in refused {
            logger.error("zone not exported", metadata: ["zone": "\(Self.shown(zone.zoneID))", "error": "\(zone.reason)"])
            summary.zonesFailed.append((zone.zoneID, zone.reason))
        }
        if !configuration.zoneFilter.isEmpty {
            let unknown: [String]
            (zones, unknown) = Self.zones(zones, named: configuration.zoneFilter)
            if !unknown.isEmpty, source.namedZones != nil {
                throw RunError(.usage, summary: nil, message: "--zone names a zone the pipeline does not follow: \(unknown.joined(separator: ", "))")
            }
        }
        if let shard = configuration.shard {
            let all = zones.count
            zones = zones.filter(shard.holds)
            logger.info("this shard takes its zones", metadata: ["shard": "\(shard)", "zones": "\(zones.count)", "of": "\(all)"])
        }
        return zones
    }

    /// Fetches up to `zonesAtOnce` zones at once, starting the next as one ends. What stops the
    /// whole run in one zone stops the others at their next batch (each commits or drops the
    /// batch it is writing); the summary lists the zones in the order they were given.
    private func fetchInParallel(_ zones: [ZoneID], runID: Int64, summary: inout RunSummary, logger: Logger) async throws {
        let serial = SerialEvents(events)
        let worker = {
            var worker = Runner(configuration: configuration, source: source, destination: destination, logger: logger) { event in
                await serial.deliver(event)
            }
            // When zones outnumber the connections, fetching waits on the network rather than on
            // writing: a zone fetches its next batch while its last one waits for a connection.
            let connections = max(configuration.parallelZones, 1)
            let active = min(zonesAtOnce, zones.count)
            worker.fetchesAhead = active > connections
            // Together the zones hold about `commitEvery` records, and `commitEveryBytes`, per
            // connection (one batch per zone, or two when fetching ahead). A batch is whole pages,
            // one at least.
            let held = active * (worker.fetchesAhead ? 2 : 1)
            func share(_ total: Int) -> Int { max(1, min(total, total * connections / held)) }
            worker.batchRecords = share(configuration.commitEvery)
            worker.batchBytes = share(configuration.commitEveryBytes)
            return worker
        }()
        var parts = [RunSummary?](repeating: nil, count: zones.count)
        var stop: (any Error)?
        await withTaskGroup(of: (Int, RunSummary, (any Error)?).self) { group in
            var next = 0
            func startNext() {
                let index = next
                let zone = zones[next]
                next += 1
                group.addTask {
                    var part = RunSummary(runID: runID, pipeline: worker.configuration.pipeline, status: .running)
                    do {
                        try Task.checkCancellation()
                        try await worker.fetchZone(zone, runID: runID, summary: &part, logger: logger)
                        return (index, part, nil)
                    } catch {
                        return (index, part, error)
                    }
                }
            }
            while next < min(zones.count, zonesAtOnce) { startNext() }
            while let (index, part, error) = await group.next() {
                parts[index] = part
                if let error {
                    // The first error says why; the others are the cancellation it caused.
                    if stop == nil || (Self.isCancellation(stop!) && !(error is CancellationError)) { stop = error }
                    group.cancelAll()
                } else if stop == nil, next < zones.count {
                    startNext()
                }
            }
        }
        for part in parts { if let part { summary.add(part) } }
        if let stop { throw stop }
    }

    /// The zones `names` name (`--zone`), and the names that name none. By bytes: `café`
    /// composed and decomposed are one String to Swift and two zones to CloudKit.
    static func zones(_ zones: [ZoneID], named names: [String]) -> (named: [ZoneID], unknown: [String]) {
        (
            zones.filter { zone in names.contains { ExactName.same($0, zone.zoneName) } },
            names.filter { name in !zones.contains { ExactName.same($0.zoneName, name) } }
        )
    }

    private func applyZoneDeletion(_ deletion: ZoneDeletion, runID: Int64, summary: inout RunSummary) async throws {
        let outcome = try await destination.deleteZone(deletion, runID: runID)
        summary.totals += outcome
        summary.zonesDeleted.append(deletion)
        await events(.zoneDeleted(deletion, outcome: outcome))
    }

    private func fetchZone(_ zone: ZoneID, runID: Int64, summary: inout RunSummary, logger: Logger) async throws {
        var logger = logger
        logger[metadataKey: "zone"] = "\(zone.zoneName)"
        guard try await destination.claimZone(zone) else {
            summary.zonesClaimedElsewhere.append(zone)
            await events(.zoneClaimedElsewhere(zone))
            return
        }
        summary.zonesClaimed += 1
        var zoneTotal = BatchOutcome()
        var zoneError: (any Error)?
        do {
            try await fetchClaimedZone(zone, runID: runID, total: &zoneTotal, logger: logger)
        } catch let error as SyncError where error.code == .zoneNotFound {
            // A followed zone that the server no longer knows has been deleted.
            let deletion = ZoneDeletion(zoneID: zone, reason: .deleted)
            do {
                try await applyZoneDeletion(deletion, runID: runID, summary: &summary)
            } catch {
                zoneError = error
            }
        } catch {
            zoneError = error
        }
        try? await destination.releaseZone(zone)
        summary.totals += zoneTotal
        await events(.didFetchRecordZoneChanges(zone, error: zoneError))

        guard let zoneError else {
            if zoneTotal.records > 0 || zoneTotal.pages > 0 && zoneTotal.swept > 0 {
                summary.zonesApplied.append(zone)
            } else {
                summary.zonesUpToDate.append(zone)
            }
            try? await destination.recordZoneError(zone, message: nil)
            return
        }
        // What stops the whole run: a cancellation, a person needed, the destination failing.
        if Self.isCancellation(zoneError) { throw CancellationError() }
        guard let failure = zoneError as? SyncError else { throw zoneError }
        if failure.code == .authenticationRequired { throw failure }
        logger.error("zone failed", metadata: ["error": "\(zoneError)"])
        try? await destination.recordZoneError(zone, message: "\(zoneError)")
        summary.zonesFailed.append((zone, "\(zoneError)"))
    }

    /// `listed` in parts of at most `names` names.
    static func parts(of listed: [ListedRecords], names: Int) -> [[ListedRecords]] {
        var parts: [[ListedRecords]] = []
        var part: [ListedRecords] = []
        var count = 0
        for list in listed {
            var start = 0
            while start < list.names.count {
                let end = min(list.names.count, start + max(1, names - count))
                part.append(
                    ListedRecords(recordType: list.recordType, names: Array(list.names[start..<end]), changeTags: Array(list.changeTags[start..<end])))
                count += end - start
                start = end
                if count >= names {
                    parts.append(part)
                    part = []
                    count = 0
                }
            }
        }
        if !part.isEmpty { parts.append(part) }
        return parts
    }

    /// How many pages of a zone are fetched ahead of the one being read: a batch's worth when
    /// the next batch is fetched while the last is written, else one (the next page is asked for
    /// while this one is read). A page holds at most what the source says (200 entries,
    /// CloudKit's largest resultsLimit, for a change feed). Pages of large records are fetched
    /// ahead only up to a batch's bytes (`batchBytes`, given to `zonePages`).
    func pagesReadAhead(in zone: ZoneID) -> Int {
        fetchesAhead ? max(1, batchRecords / max(1, source.entriesPerPage(in: zone))) : 1
    }

    /// Fetches and applies one claimed zone to the end of its feed; `total` holds what was
    /// committed, also when the zone fails part way.
    ///
    /// The zone's pages come as an async sequence with a bounded read-ahead, so the next pages
    /// are fetched while a batch is written; batches commit one after another in feed order, so a
    /// token is never committed before the rows of the pages it follows. When the destination has
    /// a connection to spare, the next batch is written alongside the last (`BatchesInFlight`).
    private func fetchClaimedZone(_ zone: ZoneID, runID: Int64, total: inout BatchOutcome, logger: Logger) async throws {
        var checkpoint = try await destination.zoneCheckpoint(zone)
        var inFlight = BatchesInFlight(destination: destination, logger: logger)
        /// What a batch that ended applied: counted, and its token told.
        func ended(_ batches: [(ChangeBatch, BatchOutcome)]) async {
            for (batch, outcome) in batches {
                // The batch's records are gone: what they held goes back to the system, so that a
                // long backfill's resident memory stays flat (see FreedMemory).
                FreedMemory.releaseInBackground()
                total += outcome
                checkpoint.token = batch.token
                if batch.finishesResync { checkpoint.resyncing = false }
                await events(.stateUpdate(zone, batch.token))
                await events(.fetchedRecordZoneChanges(zone, batch: outcome, total: total))
            }
        }
        do {
            var resyncedThisRun = false
            await events(.willFetchRecordZoneChanges(zone, resyncing: checkpoint.resyncing))

            var pending = PendingEntries()
            var listed: [ListedRecords] = []
            var listedCount = 0
            var pendingPages = 0
            var pendingBytes = 0
            var sequence = 0
            var token = checkpoint.token
            /// The token the last batch started moves the zone to.
            var startedToken = checkpoint.token
            var progress = FeedProgress(limits: configuration.stall)
            var pages = source.zonePages(in: zone, since: token, readingAhead: pagesReadAhead(in: zone), bytes: batchBytes).makeAsyncIterator()

            while true {
                try Task.checkCancellation()
                var page: ZoneChangePage
                do {
                    // The feed ends after a page that says no more are coming, and the loop with it.
                    guard let next = try await pages.next() else { throw CancellationError() }
                    page = next
                    await events(.fetchedZonePage(zone))
                } catch let error as SyncError where error.code == .changeTokenExpired {
                    guard checkpoint.token != nil || token != nil, !resyncedThisRun else {
                        throw SyncError(
                            .failed, message: "the server rejected the zone's token again after a resync: \(error.message)", underlying: error)
                    }
                    // Nothing uncommitted is kept: the resync starts over from a nil token.
                    resyncedThisRun = true
                    logger.warning("the zone's change token is no longer accepted; resyncing the zone", metadata: ["error": "\(error.message)"])
                    await ended(try await inFlight.endAll())
                    checkpoint = try await destination.beginResync(zone, reason: "change token expired")
                    await events(.resyncStarted(zone, reason: "change token expired"))
                    pending.removeAll()
                    listed.removeAll()
                    listedCount = 0
                    pendingPages = 0
                    pendingBytes = 0
                    token = nil
                    startedToken = nil
                    progress = FeedProgress(limits: configuration.stall)
                    pages = source.zonePages(in: zone, since: nil, readingAhead: pagesReadAhead(in: zone), bytes: batchBytes).makeAsyncIterator()
                    continue
                }

                if let stuck = progress.note(page, fetchedFrom: token) { throw SyncError(.failed, zoneID: zone, message: stuck) }

                /// Starts applying what is pending as one batch with the token after it.
                func commitPending(token batchToken: ChangeToken, isLast: Bool) async throws {
                    // The records a sweep lists without a row are fetched before its batch, which
                    // is applied alone anyway (`BatchesInFlight`): a run ended between the two
                    // reads the sweep's pages again, and lists what is still missing.
                    // A name the batch itself writes (a pass read it in the same rounds) is not.
                    if !listed.isEmpty, let committed = startedToken {
                        await ended(try await inFlight.endAll())
                        let written = pending.liveRecordNames()
                        let missing = try await destination.listedWithoutRows(listed, in: zone).compactMap { list -> ListedRecords? in
                            let names = list.names.filter { !written.contains(ExactName($0)) }
                            return names.isEmpty ? nil : ListedRecords(recordType: list.recordType, names: names)
                        }
                        if !missing.isEmpty { try await fetchListedWithoutRows(missing, at: committed) }
                    }
                    var batch = ChangeBatch(
                        zoneID: zone, runID: runID, generation: checkpoint.generation, pageCount: pendingPages,
                        entries: pending.take(), from: startedToken, token: batchToken, isLast: isLast,
                        finishesResync: checkpoint.resyncing && isLast)
                    batch.listed = listed
                    batch.sequence = sequence
                    sequence += 1
                    listed = []
                    listedCount = 0
                    pendingPages = 0
                    pendingBytes = 0
                    await ended(try await inFlight.start(batch))
                    startedToken = batchToken
                }

                /// Records a deletion sweep listed without a live row (the reads before missed
                /// them: a query index that showed them late), fetched by name and applied in
                /// batches of their own at the zone's committed token, nothing else in flight.
                /// Their rows get the sweep's generation, so its end keeps them.
                func fetchListedWithoutRows(_ listed: [ListedRecords], at committed: ChangeToken) async throws {
                    logger.notice(
                        "a deletion sweep listed records that have no row; fetching them by name",
                        metadata: ["records": "\(listed.reduce(0) { $0 + $1.names.count })"])
                    // A request's worth a batch: a batch of records read by name is bounded as a
                    // page is, whatever their size.
                    for part in Self.parts(of: listed, names: min(batchRecords, source.entriesPerLookup)) {
                        let entries = try await source.lookUpRecords(part, in: zone)
                        guard !entries.isEmpty else { continue }
                        var batch = ChangeBatch(
                            zoneID: zone, runID: runID, generation: checkpoint.generation, pageCount: 0, entries: entries, from: committed,
                            token: committed, isLast: false, finishesResync: false)
                        batch.sequence = sequence
                        sequence += 1
                        await ended([(batch, try await destination.apply(batch))])
                    }
                }

                if page.beginsSweep {
                    // What came before the sweep is committed under the generation it was fetched
                    // in; the sweep's own rows, and every row written after, get the next one.
                    if !pending.isEmpty || !listed.isEmpty { try await commitPending(token: token ?? page.syncToken, isLast: false) }
                    await ended(try await inFlight.endAll())
                    checkpoint = try await destination.beginSweep(zone, token: page.syncToken)
                    token = page.syncToken
                    startedToken = page.syncToken
                    await events(.resyncStarted(zone, reason: "deletion sweep"))
                    continue
                }

                // An empty page (the feed is current) is fetched but applies nothing.
                if !page.entries.isEmpty || !page.listed.isEmpty {
                    pendingPages += 1
                    pendingBytes += page.byteCount
                }
                pending.append(taking: &page.entries)
                listed += page.listed
                listedCount += page.listed.reduce(0) { $0 + $1.names.count }
                token = page.syncToken

                // Names are a small part of a record: a batch lists up to ten times its records.
                // Large records end a batch sooner, by the bytes their pages hold in memory.
                if pending.count + listedCount / 10 >= batchRecords || pendingBytes >= batchBytes || !page.moreComing {
                    try await commitPending(token: page.syncToken, isLast: !page.moreComing)
                }
                if !page.moreComing {
                    await ended(try await inFlight.endAll())
                    return
                }
            }
        } catch {
            // What was in flight commits or not; what did is counted before the zone fails.
            await ended(await inFlight.abandon())
            throw error
        }
    }
}
