import CloudKitModel
import FakeCloudKit
import Foundation

/// `records/query`: the records of one type in a zone (the `_defaultZone` unless the body names
/// another), filtered and sorted on `modifiedTimestamp`, paged by `continuationMarker`, as the
/// public database is read. As strict as CloudKit may be where its reference is silent:
///
/// - **Index lag.** CloudKit updates its query indexes asynchronously, so an entry added to a
///   zone (a new version, a deletion) is seen by queries only once its own lag has passed
///   (`indexLag`, drawn for each entry), and so not in modification order; until then a query
///   sees the version before it.
/// - **Indexes.** A filter on `modifiedTimestamp` needs `___modTime` queryable, a sort on it
///   `___modTime` sortable, and a query with no filter `___recordID` queryable; a query without
///   them is refused 400 `BAD_REQUEST` naming the index, as CloudKit refuses it. Every index
///   exists unless `indexes/set` says otherwise for the record type.
/// - **Ties.** Records with equal sort values come in an order of the server's (a hash of their
///   names), not by name; without `sortBy`, every record does.
/// - **Continuation.** A marker is a position in the query's answer as it is *when the next page
///   is asked*: a record changed between pages moves to the end of the order, and the records
///   after it move one place up, so one of them can be passed over by a chain of markers
///   (zonefeed reads the ties once more when its chain ends).
extension FakeCloudKitStore {
    struct QueryBody: Decodable {
        var zoneID: ZoneIDBody?
        var resultsLimit: Int?
        var query: Query?
        var continuationMarker: String?
        var desiredKeys: [String]?

        struct Query: Decodable {
            var recordType: String?
            var filterBy: [Filter]?
            var sortBy: [Sort]?
        }

        struct Filter: Decodable {
            var comparator: String
            var fieldName: String?
            var systemFieldName: String?
            var fieldValue: FieldValueBody?
        }

        struct FieldValueBody: Decodable {
            var value: Double?
            var type: String?
        }

        struct Sort: Decodable {
            var fieldName: String?
            var systemFieldName: String?
            var ascending: Bool?
        }
    }

    /// The system indexes of a record type a query may need (CloudKit Dashboard's names).
    struct QueryIndexes: Sendable, Equatable {
        var modTimeQueryable = true
        var modTimeSortable = true
        var recordIDQueryable = true
    }

    /// A record type's index as it stood: its live records in modification order (or in the
    /// server's order, for queries without a sort), from which every query's answer is cut
    /// until the zone or its index changes.
    struct QueryAnswerKey: Hashable {
        var database: String
        var zone: ZoneKey
        var epoch: Int
        var historyCount: Int
        var visibleAdded: Int
        var recordType: String
        var sorted: Bool
    }

    /// What a query compares and sorts of one live record, and where to make the record from.
    struct QueryItem {
        enum Origin {
            case generated(position: Int)
            case added(index: Int)
        }
        var name: RecordNameKey
        var recordType: String
        var modifiedMs: Int64
        var origin: Origin
        /// The server's order among equal sort values.
        var tieBreak: UInt64
    }

    enum Comparator: String {
        case equals = "EQUALS"
        case notEquals = "NOT_EQUALS"
        case lessThan = "LESS_THAN"
        case lessThanOrEquals = "LESS_THAN_OR_EQUALS"
        case greaterThan = "GREATER_THAN"
        case greaterThanOrEquals = "GREATER_THAN_OR_EQUALS"

        func holds(_ value: Int64, _ bound: Int64) -> Bool {
            switch self {
            case .equals: value == bound
            case .notEquals: value != bound
            case .lessThan: value < bound
            case .lessThanOrEquals: value <= bound
            case .greaterThan: value > bound
            case .greaterThanOrEquals: value >= bound
            }
        }
    }

    /// Why a request's zone cannot be read: the reply that says so.
    struct ZoneRefusal: Error {
        var reply: Reply
    }

    /// The zone a request names in `zoneID`, or the database's `_defaultZone` when it names none.
    func requestedZone(_ zoneID: ZoneIDBody?, database: String) -> Result<Zone, ZoneRefusal> {
        let zoneName = zoneID?.zoneName ?? ZoneID.defaultZoneName
        if zoneName == ZoneID.defaultZoneName {
            guard let defaultZone = databases[database]?.defaultZone else { return .failure(ZoneRefusal(reply: .badRequest("unknown database '\(database)'"))) }
            return .success(defaultZone)
        }
        guard let key = zoneKey(named: zoneName, owner: zoneID?.ownerRecordName, database: database), let custom = databases[database]?.zones[key]
        else {
            return .failure(ZoneRefusal(reply: .error(404, "ZONE_NOT_FOUND", "zone '\(zoneName)' does not exist in the \(database) database")))
        }
        return .success(custom)
    }

    func recordsQuery(database: String, body: [UInt8]) -> Reply {
        guard let request = decode(QueryBody.self, from: body, emptyAs: nil) else {
            return .badRequest("records/query: the body is not a JSON object with a query")
        }
        guard let recordType = request.query?.recordType, !recordType.isEmpty else {
            return .badRequest("records/query needs query.recordType")
        }
        guard let limit = Self.limit(request.resultsLimit) else { return .badRequest("resultsLimit must be between 1 and 200") }
        let zone: Zone
        switch requestedZone(request.zoneID, database: database) {
        case .success(let found): zone = found
        case .failure(let refusal): return refusal.reply
        }

        // What is asked, checked against what the fake serves and the type's indexes.
        var filters: [(Comparator, Int64)] = []
        for filter in request.query?.filterBy ?? [] {
            guard filter.systemFieldName == "modifiedTimestamp", filter.fieldName == nil else {
                return .badRequest(
                    "the fake server filters on systemFieldName modifiedTimestamp only, not \(filter.systemFieldName ?? filter.fieldName ?? "nothing")")
            }
            guard let comparator = Comparator(rawValue: filter.comparator) else {
                return .badRequest("unknown comparator '\(filter.comparator)'")
            }
            guard let value = filter.fieldValue?.value, value.isFinite, abs(value) < 9e15 else {
                return .badRequest("a modifiedTimestamp filter needs fieldValue.value, a time in milliseconds")
            }
            filters.append((comparator, Int64(value)))
        }
        var ascending: Bool?
        for sort in request.query?.sortBy ?? [] {
            guard sort.systemFieldName == "modifiedTimestamp", sort.fieldName == nil, ascending == nil else {
                return .badRequest("the fake server sorts on systemFieldName modifiedTimestamp only, once")
            }
            ascending = sort.ascending ?? true
        }
        let indexes = queryIndexes[recordType] ?? QueryIndexes()
        if !filters.isEmpty, !indexes.modTimeQueryable {
            return .badRequest("Field '___modTime' is not marked queryable (record type \(recordType))")
        }
        if ascending != nil, !indexes.modTimeSortable {
            return .badRequest("Field '___modTime' is not marked sortable (record type \(recordType))")
        }
        if filters.isEmpty, !indexes.recordIDQueryable {
            return .badRequest("Field '___recordID' is not marked queryable (record type \(recordType))")
        }

        let fingerprint = Fingerprint.of(
            "\(database)/\(zone.id.zoneName)/\(zone.epoch)/\(recordType)/\(filters.map { "\($0.0.rawValue)\($0.1)" })/\(ascending.map { "\($0)" } ?? "-")")
        var offset = 0
        if let marker = request.continuationMarker {
            let parts = marker.split(separator: ":")
            guard parts.count == 3, parts[0] == "q1", UInt64(parts[1], radix: 16) == fingerprint, let at = Int(parts[2]), at >= 0 else {
                return .badRequest("continuationMarker does not belong to this query")
            }
            offset = at
        }

        // Visible entries only ever become more, so their count names the index's state.
        let now = DispatchTime.now().uptimeNanoseconds
        let visible = zone.visibleAt.reduce(0) { $0 + ($1 <= now ? 1 : 0) }
        let answerKey = QueryAnswerKey(
            database: database, zone: ZoneKey(zone.id), epoch: zone.epoch, historyCount: zone.historyCount, visibleAdded: visible,
            recordType: recordType, sorted: ascending != nil)
        let index: [QueryItem]
        if let cached = queryAnswers[answerKey] {
            index = cached
        } else {
            var sorted = queryItems(database: database, zone: zone, visibleBy: now).filter { $0.recordType == recordType }
            if ascending != nil {
                sorted.sort { a, b in a.modifiedMs != b.modifiedMs ? a.modifiedMs < b.modifiedMs : a.tieBreak < b.tieBreak }
            } else {
                sorted.sort { $0.tieBreak < $1.tieBreak }
            }
            index = sorted
            queryAnswers[answerKey] = index
            queryAnswerOrder.append(answerKey)
            // A few indexes: one over 320,000 records takes about 15 MB.
            if queryAnswerOrder.count > 4 { queryAnswers[queryAnswerOrder.removeFirst()] = nil }
        }
        let items = Self.answer(from: index, sortedAscending: ascending, filters: filters)

        let start = min(offset, items.count)
        let end = min(items.count, start + limit)
        var writer = JSONWriter(capacity: 320 * 1024)
        writer.sortsKeys = false
        writer.literal("{\"records\":[")
        let desiredKeys = request.desiredKeys.map(Set.init)
        for (i, record) in records(for: items[start..<end], in: zone).enumerated() {
            if i > 0 { writer.literal(",") }
            writer.write(record: record, zoneID: zone.id, desiredKeys: desiredKeys)
        }
        writer.literal("]")
        if end < items.count {
            writer.literal(",\"continuationMarker\":")
            writer.writeString("q1:\(String(fingerprint, radix: 16)):\(end)")
        }
        writer.literal("}")
        return Reply(body: writer.bytes)
    }

    /// A query's answer cut from its type's index: the range its bounds on the modification time
    /// give (found by halving, as the index is in that order), then the other filters, in the
    /// order asked.
    static func answer(from index: [QueryItem], sortedAscending ascending: Bool?, filters: [(Comparator, Int64)]) -> [QueryItem] {
        guard let ascending else { return index.filter { item in filters.allSatisfy { $0.0.holds(item.modifiedMs, $0.1) } } }
        func firstIndex(where atOrPast: (Int64) -> Bool) -> Int {
            var low = 0
            var high = index.count
            while low < high {
                let middle = (low + high) / 2
                if atOrPast(index[middle].modifiedMs) { high = middle } else { low = middle + 1 }
            }
            return low
        }
        var lower = 0
        var upper = index.count
        var others: [(Comparator, Int64)] = []
        for (comparator, bound) in filters {
            switch comparator {
            case .greaterThanOrEquals: lower = max(lower, firstIndex { $0 >= bound })
            case .greaterThan: lower = max(lower, firstIndex { $0 > bound })
            case .lessThan: upper = min(upper, firstIndex { $0 >= bound })
            case .lessThanOrEquals: upper = min(upper, firstIndex { $0 > bound })
            case .equals, .notEquals: others.append((comparator, bound))
            }
        }
        var range = Array(index[lower..<max(lower, upper)])
        if !others.isEmpty { range = range.filter { item in others.allSatisfy { $0.0.holds(item.modifiedMs, $0.1) } } }
        return ascending ? range : range.reversed()
    }

    /// The live records of a zone as its query index sees them now: the generator's entries (all
    /// visible from the start), then each added entry whose index lag has passed.
    func queryItems(database: String, zone: Zone, visibleBy now: UInt64) -> [QueryItem] {
        var latest: [RecordNameKey: Int] = [:]
        var items: [QueryItem?] = []
        if let feed = zone.generator ?? feed, let index = zone.generatorIndex, zone.generatedCount > 0 {
            let summaries = generatedSummaries(database: database, zone: zone, feed: feed, index: index)
            items.reserveCapacity(summaries.count)
            for (position, summary) in summaries.enumerated() {
                if let type = summary.recordType {
                    let item = QueryItem(
                        name: summary.name, recordType: type, modifiedMs: summary.modifiedMs, origin: .generated(position: position),
                        tieBreak: Self.tieBreak(summary.name))
                    if let at = latest[summary.name] {
                        items[at] = item
                    } else {
                        latest[summary.name] = items.count
                        items.append(item)
                    }
                } else if let at = latest.removeValue(forKey: summary.name) {
                    items[at] = nil
                }
            }
        }
        for (index, entry) in zone.added.enumerated() where index >= zone.visibleAt.count || zone.visibleAt[index] <= now {
            switch entry {
            case .record(let record):
                let name = RecordNameKey(record.recordName)
                let item = QueryItem(
                    name: name, recordType: record.recordType, modifiedMs: record.modified?.timestamp ?? 0, origin: .added(index: index),
                    tieBreak: Self.tieBreak(name))
                // A new version is a new index entry: it goes where a new record would.
                if let at = latest[name] { items[at] = nil }
                latest[name] = items.count
                items.append(item)
            case .deleted(let name):
                if let at = latest.removeValue(forKey: RecordNameKey(name)) { items[at] = nil }
            case .error, .unreadable:
                break
            }
        }
        return items.compactMap { $0 }
    }

    /// The summaries of a zone's generated entries, made once per zone incarnation.
    func generatedSummaries(database: String, zone: Zone, feed: FakeFeed, index: Int) -> [FakeFeed.EntrySummary] {
        let key = SnapshotKey(database: database, zone: ZoneKey(zone.id), epoch: zone.epoch, position: zone.generatedCount)
        if let cached = querySummaries[key] { return cached }
        let summaries = feed.entrySummaries(zone: index, range: 0..<zone.generatedCount)
        querySummaries[key] = summaries
        return summaries
    }

    static func tieBreak(_ name: RecordNameKey) -> UInt64 {
        switch name {
        case .uuid(let a, let b): return Fingerprint.of(withUnsafeBytes(of: (a, b)) { Array($0) })
        case .text(let name): return Fingerprint.of(name.text)
        }
    }

    /// The records of a page of query items, in order: each run of generated ones made together
    /// by `records(of:at:)` (which makes consecutive positions at once), added ones as stored.
    func records(for items: ArraySlice<QueryItem>, in zone: Zone) -> [Record] {
        var out: [Record] = []
        out.reserveCapacity(items.count)
        var generated: [Int] = []
        func flush() {
            out += records(of: zone, at: generated[...])
            generated.removeAll(keepingCapacity: true)
        }
        for item in items {
            switch item.origin {
            case .generated(let position):
                generated.append(position)
            case .added(let index):
                flush()
                if case .record(let record) = zone.added[index] { out.append(record) }
            }
        }
        flush()
        return out
    }
}
