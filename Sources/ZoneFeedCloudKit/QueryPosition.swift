import Foundation
import ZoneFeed

/// Where a zone read by query (`_defaultZone`) stands, kept as its change token: committed in
/// the checkpoint table with the rows it covers, as a change feed's token is. Each record type
/// has a **watermark**, the modification time and name of the last record applied; while a run
/// reads, each type also has the **slices** of its modification-time range still being read,
/// each its own resumable position; a deletion sweep in progress has slices of its own.
///
/// The token is `q1:` and this as JSON: a few hundred bytes, readable in `zonefeed status`.
struct QueryPosition: Codable, Equatable, Sendable {
    static let prefix = "q1:"

    var types: [String: TypePosition] = [:]
    /// The deletion sweep in progress, by record type; nil when none is.
    var sweep: [String: [QuerySlice]]?
    /// When the last sweep began (seconds since 1970, this machine's clock); nil before the first.
    var lastSweepAt: Double?
    /// Runs finished since the last sweep.
    var runsSinceSweep = 0
    /// This run's pass has ended and a sweep is due: the next page begins it.
    var sweepStarting = false

    struct TypePosition: Codable, Equatable, Sendable {
        /// The last record applied, in modification order; nil before the first.
        var watermark: Watermark?
        /// The earliest modification time the type's first backfill found: where a sweep starts.
        var earliestMs: Int64?
        /// The slices still being read by this run's pass; nil at rest between runs.
        var slices: [QuerySlice]?
    }

    struct Watermark: Codable, Equatable, Comparable, Sendable {
        var ms: Int64
        var name: String

        static func < (a: Watermark, b: Watermark) -> Bool { (a.ms, a.name) < (b.ms, b.name) }
    }

    /// Whether a run is part way: a pass or a sweep has slices left.
    var isAtRest: Bool { types.values.allSatisfy { $0.slices == nil } && sweep == nil && !sweepStarting }
    var passInProgress: Bool { types.values.contains { $0.slices != nil } }

    init() {}

    /// The position a token holds; nil for no token. A token that is not one (a corrupt
    /// checkpoint, one of another kind) is taken as expired, so that the zone is read again
    /// from the beginning under a new generation.
    static func decode(_ token: ChangeToken?) throws -> QueryPosition? {
        guard let token else { return nil }
        guard token.value.hasPrefix(prefix),
            let position = try? JSONDecoder().decode(QueryPosition.self, from: Data(token.value.utf8.dropFirst(prefix.utf8.count)))
        else {
            throw SyncError(
                .changeTokenExpired,
                message: "the zone's checkpoint does not hold a query position (\(token)); the zone is read again from the beginning")
        }
        return position.clamped
    }

    /// Every time within `QueryZoneReader.timeRange`, whatever a checkpoint was made to hold,
    /// so that no sum or difference of them can overflow.
    var clamped: QueryPosition {
        func clamp(_ slices: [QuerySlice]?) -> [QuerySlice]? {
            slices?.map { slice in
                var slice = slice
                slice.from = QueryZoneReader.clamped(slice.from)
                slice.to = slice.to.map { max(slice.from, QueryZoneReader.clamped($0)) }
                return slice
            }
        }
        var position = self
        for (type, state) in types {
            var state = state
            if let ms = state.watermark?.ms { state.watermark?.ms = QueryZoneReader.clamped(ms) }
            state.earliestMs = state.earliestMs.map(QueryZoneReader.clamped)
            state.slices = clamp(state.slices)
            position.types[type] = state
        }
        position.sweep = sweep?.mapValues { clamp($0)! }
        position.runsSinceSweep = min(max(runsSinceSweep, -1), 1_000_000)
        return position
    }

    var token: ChangeToken {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        // Encoding plain numbers, strings and arrays cannot fail.
        let data = try! encoder.encode(self)
        return ChangeToken(Self.prefix + String(decoding: data, as: UTF8.self))
    }
}

/// A part of one record type's modification-time range, read in order by keyset: each page asks
/// for records modified at or after `from` (and before `to`), sorted by modification time, and the
/// next page starts at the last time the page held. Records that share that time are read again
/// (and dropped, or counted unchanged), so none is passed over when the answer shifts between
/// pages. A page that holds a single time only (more records share it than a page holds) is
/// followed by its continuation marker instead.
struct QuerySlice: Codable, Equatable, Sendable {
    /// Inclusive, in milliseconds.
    var from: Int64
    /// Exclusive; nil for the slice that reaches the present, which is never split.
    var to: Int64?
    /// Within a run of records sharing `from` that is longer than a page.
    var marker: String?
    /// The run of ties at `from` read once more by a slice of that time alone, after a marker
    /// chain through it ended: a marker is a position in an answer that shifts, so a record
    /// changed or deleted during the chain moved the records after it up a place, and the
    /// chain passed over one. Nil (left out of the token) for any other slice.
    var recheck: Bool?

    var isOpen: Bool { to == nil }

    /// Whether it can be split in two at its middle: a bounded slice at least two
    /// milliseconds wide, not inside a run of ties (the marker belongs to the range).
    var canSplit: Bool {
        guard let to, marker == nil else { return false }
        return to - from >= 2
    }
}
