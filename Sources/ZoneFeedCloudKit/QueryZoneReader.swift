import CloudKitModel
import CloudKitWebServices
import Foundation
import Logging
import Synchronization
import ZoneFeed

/// Reads a zone that has no change feed (`_defaultZone` of the public or private database) with
/// `records/query`, one record type at a time, and presents it to the engine as a feed: each call
/// is one **round** of queries, at most `maxConcurrentRequests` at once, and its page holds what
/// they found, with the position after them as its token (`QueryPosition`).
///
/// A run is a **pass** over each type from its watermark minus `queryLag` (CloudKit updates its
/// query indexes asynchronously, so a record may appear after one modified later), or, the
/// first time, a **backfill** of the type's whole range split into slices read at once. When a
/// pass ends and a deletion sweep is due, the next pages **sweep**: they list every record name
/// of each type (no fields), and the engine tombstones the rows the sweep did not list.
struct QueryZoneReader: Sendable {
    var client: CloudKitClient
    var zone: ZoneID
    var recordTypes: [String]
    var settings: CloudKitSettings
    var memory: QueryReadMemory
    var logger: Logger
    /// This machine's clock, for the sweep's schedule.
    var now: @Sendable () -> Date = { Date() }

    /// How many slices are read at once: as many requests as may be in flight.
    var sliceTarget: Int { max(1, settings.maxConcurrentRequests) }
    var lagMs: Int64 {
        let seconds = settings.queryLagSeconds
        return seconds.isFinite ? Int64(min(max(seconds, 0), CloudKitSettings.queryLagSecondsRange.upperBound) * 1000) : 300_000
    }

    /// How often a slice's marker may be refused, and the slice read again from its time, along
    /// one chain of pages.
    static let maxMarkerRestarts = 3

    /// This machine's time, which no position is put past (see `aheadWarningMs`). A clock that
    /// cannot be read as milliseconds caps nothing.
    var nowMs: Int64 { Self.clamped(Int64(exactly: (now().timeIntervalSince1970 * 1000).rounded(.down)) ?? Self.timeRange.upperBound) }

    /// A watermark minus the lag, never below the earliest time.
    func lagged(_ ms: Int64) -> Int64 { max(Self.timeRange.lowerBound, Self.clamped(ms) - lagMs) }

    // MARK: Rounds

    func page(after token: ChangeToken?) async throws -> ZoneChangePage {
        let page = try await makePage(after: token)
        memory.gave(page.syncToken, carrying: page.entries.compactMap { if case .deleted(let name) = $0 { name } else { nil } })
        return page
    }

    private func makePage(after token: ChangeToken?) async throws -> ZoneChangePage {
        var position = try QueryPosition.decode(token) ?? QueryPosition()
        memory.beginPage(after: token, atRest: position.isAtRest)
        // Types the mapping no longer names are forgotten; new ones start with a backfill.
        for type in position.types.keys where !recordTypes.contains(type) { position.types[type] = nil }
        for type in recordTypes where position.types[type] == nil { position.types[type] = .init() }
        if let sweep = position.sweep { position.sweep = sweep.filter { recordTypes.contains($0.key) } }

        if position.sweepStarting {
            return beginSweep(&position)
        }
        if position.isAtRest {
            try await startPass(&position)
        }
        var page = ZoneChangePage(zoneID: zone, entries: [], syncToken: position.token, moreComing: true)
        // Deletions a query subscription named come first: a query cannot see them. A round
        // that fails gives them back for the next, and puts back the ties its other slices
        // noted: the page is asked again from the same token (`zonefeed watch` keeps this
        // memory), and records those slices gave would be dropped as given already.
        let deletions = memory.takeDeletions()
        page.entries = deletions.map { .deleted(recordName: $0) }
        let ties = memory.ties
        let sweepEnded: Bool
        do {
            sweepEnded = try await round(&position, into: &page)
        } catch {
            memory.giveBack(deletions)
            memory.ties = ties
            throw error
        }

        if position.passInProgress || position.sweep != nil {
            page.syncToken = position.token
            return page
        }
        // The pass, or the sweep, has ended: a sweep next if one is due, else the end of the run.
        if sweepEnded {
            position.runsSinceSweep = 0
        } else if position.runsSinceSweep >= 0, sweepDue(position), position.types.values.contains(where: { $0.watermark != nil }) {
            position.sweepStarting = true
            page.syncToken = position.token
            return page
        } else {
            position.runsSinceSweep += 1
        }
        page.syncToken = position.token
        page.moreComing = false
        return page
    }

    /// The page that begins a sweep: nothing but the position with the sweep's slices, each
    /// type's range from its earliest record split as a backfill's is.
    private func beginSweep(_ position: inout QueryPosition) -> ZoneChangePage {
        position.sweepStarting = false
        let types = recordTypes.filter { position.types[$0]?.watermark != nil }
        let slicesEach = max(1, sliceTarget / max(1, types.count))
        var sweep: [String: [QuerySlice]] = [:]
        for type in types {
            let state = position.types[type]!
            sweep[type] = Self.reachingBack(Self.split(from: Self.clamped(state.earliestMs ?? 0), settledBefore: lagged(state.watermark!.ms), into: slicesEach))
        }
        position.sweep = sweep
        position.lastSweepAt = now().timeIntervalSince1970
        var page = ZoneChangePage(zoneID: zone, entries: [], syncToken: position.token, moreComing: true)
        page.beginsSweep = true
        return page
    }

    /// A pass over every type: a backfill for a type without a watermark, its range split into
    /// slices; from the watermark minus the lag otherwise. A sweep left part way by a run that
    /// stopped goes on instead, alone.
    private func startPass(_ position: inout QueryPosition) async throws {
        if position.sweep != nil { return }
        let fresh = recordTypes.filter { position.types[$0]?.watermark == nil }
        let bounds = try await probe(fresh)
        let slicesEach = max(1, sliceTarget / max(1, fresh.count))
        for type in recordTypes {
            var state = position.types[type] ?? .init()
            if let watermark = state.watermark {
                state.slices = [QuerySlice(from: lagged(watermark.ms), to: nil)]
            } else if let (earliest, latest) = bounds[type] ?? nil {
                state.earliestMs = earliest
                state.slices = Self.reachingBack(Self.split(from: earliest, settledBefore: lagged(latest), into: slicesEach))
            } else {
                // Nothing of the type yet: nothing to read this run.
                state.slices = nil
            }
            position.types[type] = state
        }
        if !fresh.isEmpty, fresh.count == recordTypes.count {
            // A first backfill of every type reads everything there is: it counts as a sweep,
            // and this run as the sweep's (the end of the run makes it 0 runs since).
            position.lastSweepAt = now().timeIntervalSince1970
            position.runsSinceSweep = -1
        }
    }

    /// The earliest and latest modification time of each type, or nil when it has no records:
    /// two queries of one record each, all at once.
    private func probe(_ types: [String]) async throws -> [String: (Int64, Int64)?] {
        let nowMs = self.nowMs
        return try await withThrowingTaskGroup(of: (String, (Int64, Int64)?).self) { group in
            for type in types {
                group.addTask {
                    async let first = query(type, sort: .ascending, filters: [], marker: nil, limit: 1, desiredKeys: [])
                    async let last = query(type, sort: .descending, filters: [], marker: nil, limit: 1, desiredKeys: [])
                    let (a, b) = try await (first, last)
                    // Either answer's time stands for both: a record made between the two
                    // queries is the type's only one.
                    guard let earliest = Self.times(a.records).min() ?? Self.times(b.records).max(),
                        let latest = Self.times(b.records).max() ?? Self.times(a.records).min()
                    else {
                        // No records only when both answers say so. An error entry, an entry
                        // without a time, or none with more to come, taken for that, left the
                        // type unread, and in a resync had the end of it tombstone its rows.
                        guard a.records.isEmpty, b.records.isEmpty, a.continuationMarker == nil, b.continuationMarker == nil else {
                            throw SyncError(
                                .failed, zoneID: zone,
                                message: "CloudKit answered the query of the earliest and latest \(type) records without a record "
                                    + "and its modification time (an error entry, an entry without a time, or more to come): the "
                                    + "type's range is unknown, so nothing of it is read this run; the next run asks again")
                        }
                        return (type, nil)
                    }
                    // A record stamped ahead of this machine's clock (the year 2300, say) would
                    // spread the slices over the centuries before it and start the open one
                    // there, past every change made while the backfill runs.
                    return (type, (earliest, max(earliest, min(latest, nowMs))))
                }
            }
            var bounds: [String: (Int64, Int64)?] = [:]
            for try await (type, range) in group { bounds[type] = range }
            return bounds
        }
    }

    /// `count` slices over `from` up to `settled` (records modified before it are all in the
    /// index: it is `queryLag` before the latest one), and one open slice from there on.
    static func split(from start: Int64, settledBefore settled: Int64, into count: Int) -> [QuerySlice] {
        guard settled > start, count > 1 else { return [QuerySlice(from: start, to: nil)] }
        let bounded = count - 1
        let width = max(1, (settled - start) / Int64(bounded))
        var slices: [QuerySlice] = []
        var from = start
        while from < settled, slices.count < bounded {
            let to = slices.count == bounded - 1 ? settled : min(settled, from + width)
            slices.append(QuerySlice(from: from, to: to))
            from = to
        }
        slices.append(QuerySlice(from: settled, to: nil))
        return slices
    }

    /// The slices with the first reaching back to the earliest time: a record modified before
    /// the earliest one the probe saw (its index entry came late) is read, and listed, too.
    static func reachingBack(_ slices: [QuerySlice]) -> [QuerySlice] {
        var slices = slices
        if !slices.isEmpty { slices[0].from = timeRange.lowerBound }
        return slices
    }

    enum SliceKind: Sendable, Hashable { case pass, sweep }

    struct SliceWork: Sendable {
        var kind: SliceKind
        var type: String
        var index: Int
        var slice: QuerySlice
        /// Other bounded slices of the type were being read when this round began: an open
        /// slice that reaches the end is read once more after them.
        var waitsForOthers: Bool
    }

    struct SliceResult: Sendable {
        var work: SliceWork
        var records: [RecordEntry]
        /// nil when the slice is done.
        var next: QuerySlice?
        /// A slice of the ties' time alone, to read them once more (`QuerySlice.recheck`).
        var recheck: QuerySlice?
        /// The bytes of the answer, which its records keep alive.
        var byteCount = 0
    }

    /// One query per slice, up to `sliceTarget` at once; the page gets their records (a pass)
    /// or names (a sweep) and the position their slices' next starts. Slices left over when
    /// others end are split, so that the round after keeps as many requests in flight. Returns
    /// whether a sweep ended with it.
    private func round(_ position: inout QueryPosition, into page: inout ZoneChangePage) async throws -> Bool {
        let hadSweep = position.sweep != nil
        var work: [SliceWork] = []
        for type in recordTypes {
            for (kind, slices) in [(SliceKind.pass, position.types[type]?.slices), (.sweep, position.sweep?[type])] {
                guard let slices else { continue }
                let bounded = slices.contains { !$0.isOpen }
                for (i, slice) in slices.enumerated() {
                    work.append(SliceWork(kind: kind, type: type, index: i, slice: slice, waitsForOthers: slice.isOpen && bounded))
                }
            }
        }
        // Bounded slices first: an open slice that reaches the present while a bounded one of
        // its type is left (`waitsForOthers`) reads the present again until that one is done.
        // With fewer requests at once than slices (one: `maxConcurrentRequests: 1`), an open
        // slice read first, with the ties' read once more appended after it, was the only slice
        // read, round after round, and the read never ended.
        let reading = (work.filter { !$0.slice.isOpen } + work.filter { $0.slice.isOpen }).prefix(sliceTarget)
        let results = try await withThrowingTaskGroup(of: SliceResult.self) { group in
            for item in reading { group.addTask { try await read(item) } }
            var results: [SliceResult] = []
            for try await result in group { results.append(result) }
            return results
        }

        var listed: [String: (names: [String], tags: [String?])] = [:]
        let checksDeletions = memory.holdsDeletions
        let nowMs = self.nowMs
        var aheadOfTheClock = 0
        for result in results.sorted(by: { ($0.work.type, $0.work.index) < ($1.work.type, $1.work.index) }) {
            let item = result.work
            switch item.kind {
            case .pass:
                var state = position.types[item.type] ?? .init()
                for case .record(let record) in result.records {
                    guard let stamped = record.modified.map({ Self.clamped($0.timestamp) }) else { continue }
                    // Never past this machine's clock: see `aheadWarningMs`.
                    let ms = min(stamped, nowMs)
                    if stamped > nowMs + Self.aheadWarningMs { aheadOfTheClock += 1 }
                    let mark = QueryPosition.Watermark(ms: ms, name: record.recordName)
                    if state.watermark.map({ $0 < mark }) ?? true { state.watermark = mark }
                }
                // A version a notification said was deleted, which the index still shows.
                page.entries += result.records.filter { entry in
                    guard checksDeletions, case .record(let record) = entry else { return true }
                    return !memory.isDeleted(record.recordName, modifiedMs: record.modified?.timestamp)
                }
                state.slices?[item.index] = result.next ?? QuerySlice(from: .min, to: .min)
                if let recheck = result.recheck { state.slices?.append(recheck) }
                position.types[item.type] = state
                page.byteCount += result.byteCount
            case .sweep:
                // A record the answer gives as an error entry of its own (`TRY_AGAIN_LATER` for
                // that record alone), or as an entry zonefeed cannot read, is there too: left out
                // of the list, its row would be taken for deleted at the sweep's end. Not one the
                // server says is gone, nor one whose name was repaired (never an identity).
                for entry in result.records {
                    guard let name = entry.nameOfARecordStillThere else { continue }
                    var tag: String?
                    if case .record(let record) = entry { tag = record.recordChangeTag }
                    listed[item.type, default: ([], [])].names.append(name)
                    listed[item.type, default: ([], [])].tags.append(tag)
                }
                // The names are held until their batch commits: its bytes bound them, as they
                // bound a pass's records, where a sweep's answers of long names, counted only by
                // how many, could hold gigabytes.
                page.byteCount += result.byteCount
                position.sweep?[item.type]?[item.index] = result.next ?? QuerySlice(from: .min, to: .min)
                if let recheck = result.recheck { position.sweep?[item.type]?.append(recheck) }
            }
        }
        page.listed = listed.keys.sorted().map { ListedRecords(recordType: $0, names: listed[$0]!.names, changeTags: listed[$0]!.tags) }
        if aheadOfTheClock > 0 {
            logger.warning(
                "records modified later than this machine's clock by more than \(Self.aheadWarningMs / 60_000) minutes are applied, and reads go on from this machine's time, not theirs",
                metadata: ["records": "\(aheadOfTheClock)"])
        }

        // Done slices (marked above) go; a type with none left ends its pass.
        let done = QuerySlice(from: .min, to: .min)
        for type in recordTypes {
            guard var state = position.types[type], let slices = state.slices else { continue }
            let left = slices.filter { $0 != done }
            state.slices = left.isEmpty ? nil : left
            position.types[type] = state
        }
        if var sweep = position.sweep {
            for (type, slices) in sweep {
                let left = slices.filter { $0 != done }
                sweep[type] = left.isEmpty ? nil : left
            }
            position.sweep = sweep.isEmpty ? nil : sweep
        }
        rebalance(&position)
        return hadSweep && position.sweep == nil
    }

    /// Splits the widest bounded slices until as many slices are left as requests may be in
    /// flight, or none can be split.
    private func rebalance(_ position: inout QueryPosition) {
        func count() -> Int {
            position.types.values.reduce(0) { $0 + ($1.slices?.count ?? 0) } + (position.sweep?.values.reduce(0) { $0 + $1.count } ?? 0)
        }
        while count() < sliceTarget {
            var widest: (SliceKind, String, Int, Int64)?
            for type in recordTypes {
                for (kind, slices) in [(SliceKind.pass, position.types[type]?.slices ?? []), (.sweep, position.sweep?[type] ?? [])] {
                    for (i, slice) in slices.enumerated() where slice.canSplit {
                        let width = slice.to! - slice.from
                        if widest.map({ width > $0.3 }) ?? true { widest = (kind, type, i, width) }
                    }
                }
            }
            guard let (kind, type, i, _) = widest else { return }
            func halve(_ slices: inout [QuerySlice]) {
                let slice = slices[i]
                let middle = slice.from + (slice.to! - slice.from) / 2
                slices[i].to = middle
                slices.insert(QuerySlice(from: middle, to: slice.to), at: i + 1)
            }
            switch kind {
            case .pass: halve(&position.types[type]!.slices!)
            case .sweep: halve(&position.sweep![type]!)
            }
        }
    }

    /// One page of a slice, and where the slice goes on from.
    private func read(_ item: SliceWork) async throws -> SliceResult {
        let slice = item.slice
        var filters = [ModificationFilter(.greaterThanOrEquals, slice.from)]
        if let to = slice.to { filters.append(ModificationFilter(.lessThan, to)) }
        let desiredKeys = item.kind == .sweep ? [] : settings.desiredKeys
        let response: RecordQueryResponse
        do {
            response = try await query(
                item.type, sort: .ascending, filters: filters, marker: slice.marker, limit: settings.resultsLimit, desiredKeys: desiredKeys)
        } catch let error as SyncError where slice.marker != nil && error.code == .changeTokenExpired {
            // The marker is no longer accepted: the run of ties is read again from its start. A
            // server that refuses every marker would have the slice read its start for ever,
            // while other slices moved the zone's token on (so the engine saw progress).
            let key = QueryReadMemory.Key(kind: item.kind, type: item.type, from: slice.from)
            if memory.restarted(key) > Self.maxMarkerRestarts {
                throw SyncError(
                    .failed, zoneID: zone,
                    message: "CloudKit refused the continuation marker of a query of \(item.type) more than \(Self.maxMarkerRestarts) times "
                        + "at one time: the read does not advance (\(error.message)); the next run reads the zone again from its last commit, "
                        + "and if this persists, check that baseURL points at CloudKit Web Services")
            }
            // Read again from its start, the run gives its pages of names already given anew.
            _ = memory.markerPage(key, gaveNothingNew: false)
            logger.warning(
                "the server no longer accepts a query's continuation marker; reading from the records' time again",
                metadata: ["recordType": "\(item.type)", "error": "\(error.message)"])
            var restarted = item
            restarted.slice.marker = nil
            return try await read(restarted)
        }
        if let marker = slice.marker, response.continuationMarker == marker {
            // The marker asked with, given back: the same page again, for ever.
            throw SyncError(
                .failed, zoneID: zone,
                message: "CloudKit gave back the continuation marker a query of \(item.type) was asked with: the read does not advance; "
                    + "the next run reads the zone again from its last commit, and if this persists, check that baseURL points at "
                    + "CloudKit Web Services")
        }
        let key = QueryReadMemory.Key(kind: item.kind, type: item.type, from: slice.from)
        if slice.marker != nil { memory.markerTaken(key) }
        let seen = memory.take(key)
        // Records at the slice's start that an earlier page of this run already gave.
        let records = response.records.filter { entry in
            guard case .record(let record) = entry, record.modified.map({ Self.clamped($0.timestamp) }) == slice.from else { return true }
            return !seen.contains(ExactName(record.recordName))
        }
        if slice.marker != nil, let marker = response.continuationMarker {
            // Markers that lead to pages of names already given, for longer than the names
            // given could fill (m1, m2, m1 …, or fresh markers to the same records), read for
            // ever while other slices moved the zone's token on. A chain read again from its
            // start, after a refused marker or to find what it passed over, gives that many.
            let inARow = memory.markerPage(key, gaveNothingNew: records.isEmpty)
            if inARow > seen.count / max(1, response.records.count) + Self.maxMarkerRestarts {
                throw SyncError(
                    .failed, zoneID: zone,
                    message: "CloudKit's continuation markers for a query of \(item.type) led to \(inARow) pages in a row that gave no record "
                        + "not already given at one time (the last marker \(marker.utf8.count) bytes long): the read does not advance; the next "
                        + "run reads the zone again from its last commit, and if this persists, check that baseURL points at CloudKit "
                        + "Web Services")
            }
        }
        let times = Self.times(response.records)
        var next: QuerySlice?
        if let marker = response.continuationMarker {
            // Never past this machine's clock: records stamped ahead would carry the slice past
            // what is modified while it is read. Their pages go on by the marker instead (from
            // the clock, the same records would come again, page after page).
            if let last = Self.resumeTime(of: response.records, in: slice), last > slice.from, last <= nowMs {
                next = QuerySlice(from: last, to: slice.to)
                memory.put(QueryReadMemory.Key(kind: key.kind, type: item.type, from: last), Set(Self.names(in: response.records, at: last)))
            } else {
                // The page ends within the run of ties at the slice's start (one of its last two
                // records is there), or is ahead of this machine's clock: the marker goes on.
                next = QuerySlice(from: slice.from, to: slice.to, marker: marker, recheck: slice.recheck)
                memory.put(key, seen: seen, adding: records.compactMap { $0.recordName.map { ExactName($0) } })
            }
        } else if item.waitsForOthers {
            // The open slice has reached the present before the bounded ones ended: it reads
            // the present again once they have, for what was modified meanwhile.
            // Never past this machine's clock: a record stamped ahead would put the read again
            // past what is modified meanwhile.
            let last = min(times.max() ?? slice.from, nowMs)
            next = QuerySlice(from: max(slice.from, last), to: nil)
            memory.put(
                QueryReadMemory.Key(kind: key.kind, type: item.type, from: next!.from),
                Set(Self.names(in: response.records, at: next!.from)).union(next!.from == slice.from ? seen : []))
        }
        // A marker chain through the ties at the slice's start has ended: the slice goes on from
        // a later time, or is done. The ties are read once more by a slice of their time alone,
        // with the names the chain gave dropped, for a record it passed over (see
        // `QuerySlice.recheck`). That read is a chain of its own, and is not read again.
        var recheck: QuerySlice?
        if slice.marker != nil, slice.recheck != true, next.map({ $0.marker == nil && $0.from != slice.from }) ?? true {
            recheck = QuerySlice(from: slice.from, to: slice.from + 1, recheck: true)
            memory.put(key, seen: seen, adding: Self.names(in: records, at: slice.from))
        }
        return SliceResult(work: item, records: records, next: next, recheck: recheck, byteCount: response.byteCount)
    }

    /// The names of the records modified at `ms`.
    static func names(in records: [RecordEntry], at ms: Int64) -> [ExactName] {
        records.compactMap { entry in
            guard case .record(let record) = entry, record.modified.map({ clamped($0.timestamp) }) == ms else { return nil }
            return ExactName(record.recordName)
        }
    }

    /// Where a slice's next page starts: the earlier of the times of the page's last two records
    /// within the slice, in the answer's order (the last's, when it has one). CloudKit's query
    /// index lags, so an answer may give a record's current version at the place its index entry
    /// still has: later than the records after it, past the slice's end even. Going on from the
    /// page's latest time passed over every record between, for good, and so did going on from
    /// its second latest with two such records in a page. The records that end a page are in
    /// the index's order unless one of them is such a record: however many come before them,
    /// and one of the two, move this by nothing. A page in order reads its last record again
    /// (counted unchanged).
    static func resumeTime(of records: [RecordEntry], in slice: QuerySlice) -> Int64? {
        var last: Int64?
        var beforeLast: Int64?
        for time in times(records) where time >= slice.from && slice.to.map({ time < $0 }) ?? true {
            beforeLast = last
            last = time
        }
        guard let last else { return nil }
        return beforeLast.map { min($0, last) } ?? last
    }

    static func times(_ records: [RecordEntry]) -> [Int64] {
        records.compactMap { entry in
            guard case .record(let record) = entry else { return nil }
            return record.modified.map { clamped($0.timestamp) }
        }
    }

    /// The times a position is made of: a server's time of 1970 to the year 33658, whatever a
    /// record says, so that no sum or difference of them can overflow.
    static let timeRange: ClosedRange<Int64> = 0...1_000_000_000_000_000

    static func clamped(_ ms: Int64) -> Int64 { min(max(ms, timeRange.lowerBound), timeRange.upperBound) }

    /// A watermark is never put past this machine's clock. Each pass reads from the watermark
    /// minus the lag, so one record stamped in the year 2300 (a broken or hostile server, a
    /// client's clock) put it there, and every later change was left unread while runs said
    /// they succeeded; one stamped a few minutes ahead left the changes of those minutes unread.
    /// Such a record is applied, and read again by each pass until its time comes; one more
    /// than this far ahead is warned of, beyond any skew between the clocks.
    static let aheadWarningMs: Int64 = 600_000

    // MARK: Sweeps

    /// Whether the pipeline's `deletionSweep` asks for a sweep at the end of this run.
    func sweepDue(_ position: QueryPosition) -> Bool {
        switch settings.deletionSweep {
        case .never:
            return false
        case .everyRuns(let runs):
            return position.runsSinceSweep + 1 >= runs
        case .interval(let seconds):
            let now = now().timeIntervalSince1970
            // A sweep stamped later than now (by a clock that was ahead for a run, a position
            // edited by hand) would have put off every sweep until that date, and deletions
            // were never applied meanwhile: it is taken as long past.
            guard let last = position.lastSweepAt, last.isFinite, last <= now + Double(Self.aheadWarningMs / 1_000) else { return true }
            return now - last >= seconds
        }
    }

    // MARK: Queries

    enum Sort { case ascending, descending }

    private func query(
        _ type: String, sort: Sort, filters: [ModificationFilter], marker: String?, limit: Int, desiredKeys: [String]?
    ) async throws -> RecordQueryResponse {
        do {
            return try await client.queryRecords(
                recordType: type, zoneID: zone.zoneName == ZoneID.defaultZoneName ? nil : zone, filters: filters,
                sort: sort == .ascending ? .ascending : .descending, continuationMarker: marker, resultsLimit: limit,
                desiredKeys: desiredKeys, logger: logger)
        } catch let error as CloudKitError {
            throw Self.queryError(error, recordType: type, carriedMarker: marker != nil)
        }
    }

    /// How the engine takes a failed query: a missing index says which to add; a refused
    /// marker is read again without it; authentication needs a person; the rest fails the zone
    /// (never "zone not found": `_defaultZone` always exists, and its rows must not be dropped).
    static func queryError(_ error: CloudKitError, recordType: String, carriedMarker: Bool) -> SyncError {
        if error.isAuthenticationFailure {
            return SyncError(.authenticationRequired, message: error.description, underlying: error)
        }
        let reason = error.reason ?? ""
        if error.code == .badRequest, let index = QueryIndex.named(in: reason) {
            return SyncError(
                .failed,
                message: "CloudKit refused to query record type \(recordType): it has no \(index.description) index (\(reason)); "
                    + "in CloudKit Dashboard, add to \(recordType) the indexes zonefeed needs: ___modTime QUERYABLE and SORTABLE, "
                    + "___recordID QUERYABLE, then deploy the schema to the environment the pipeline reads",
                underlying: error)
        }
        if carriedMarker, error.code == .badRequest {
            return SyncError(.changeTokenExpired, message: "querying record type \(recordType): \(error.description)", underlying: error)
        }
        return SyncError(.failed, message: "querying record type \(recordType) failed: \(error.description)", underlying: error)
    }
}
