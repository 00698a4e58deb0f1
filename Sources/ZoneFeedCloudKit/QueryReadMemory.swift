import CloudKitModel
import Foundation
import Synchronization
import ZoneFeed

/// What a query zone's reader remembers between its pages, in memory only:
///
/// - **Ties**: the records a page gave at a slice's next start, which the next page reads again
///   and drops.
/// - **Notified deletions**: those a query subscription named (`zonefeed watch`), given to the
///   next page as tombstones; and, for a while, the records deleted so, whose versions a lagging
///   index may still show.
///
/// Both hold only along the chain of pages the engine is reading: a page asked from a token
/// other than the last one given is a new chain (a run that failed is followed by one from its
/// last commit), so the ties are forgotten and the deletions given to pages that were not
/// committed are given again.
final class QueryReadMemory: Sendable {
    struct Key: Hashable, Sendable {
        var kind: QueryZoneReader.SliceKind
        var type: String
        var from: Int64
    }

    private struct State {
        /// Names by their bytes (`ExactName`), as CloudKit tells records apart.
        var ties: [Key: Set<ExactName>] = [:]
        /// How often each slice's marker was refused and the slice read again from its time,
        /// along the chain.
        var restarts: [Key: Int] = [:]
        /// How many marker pages in a row gave each slice nothing it had not given.
        var stale: [Key: Int] = [:]
        /// Deletions not yet given to a page.
        var pending: [String] = []
        /// When each record deleted by notification was heard of.
        var recent: [ExactName: ContinuousClock.Instant] = [:]
        /// The pages of the current chain that carried deletions, by their place in it.
        var carried: [(place: Int, names: [String])] = []
        /// Each token given in the current chain, with its place.
        var places: [String: Int] = [:]
        var lastGiven: String?
    }

    private let state = Mutex(State())
    /// The most names kept as given at one slice's time. A run of ties longer than that (a
    /// marker chain at one millisecond, without end from a broken or hostile server) keeps only
    /// its last page's: the ties serve to drop records read again, and one read again past this
    /// is given again and counted unchanged, where every name of an endless run held grew
    /// without bound.
    let maxTies: Int

    /// How long a record deleted by notification is held back from the query's answers: far
    /// longer than an index lags.
    static let deletionMemory: Duration = .seconds(600)
    /// The most deletions held: a flood beyond is left to the sweep.
    static let maxDeletions = 100_000

    init(maxTies: Int = 100_000) {
        self.maxTies = maxTies
    }

    // MARK: The chain

    /// Called as a page is asked from `token`. A token that is not the last one given starts a
    /// new chain; one at rest (a run that ended committed all it was given) clears what was
    /// carried.
    func beginPage(after token: ChangeToken?, atRest: Bool) {
        state.withLock { state in
            if token?.value != state.lastGiven {
                // The pages after the committed token were never applied: what they carried is
                // given again, what they tied is forgotten.
                let committed = token.flatMap { state.places[$0.value] } ?? -1
                let lost = state.carried.filter { $0.place > committed }.flatMap(\.names)
                state.pending = lost + state.pending
                state.carried = []
                state.places = [:]
                state.ties = [:]
                state.restarts = [:]
                state.stale = [:]
            } else if atRest {
                state.carried = []
                state.places = [:]
                state.restarts = [:]
                state.stale = [:]
            }
        }
    }

    /// Called with the token a page gives, and the deletions it carries.
    func gave(_ token: ChangeToken, carrying deletions: [String]) {
        state.withLock { state in
            let place = state.places.count
            state.places[token.value] = place
            state.lastGiven = token.value
            if !deletions.isEmpty { state.carried.append((place, deletions)) }
        }
    }

    // MARK: Ties

    func take(_ key: Key) -> Set<ExactName> {
        state.withLock { $0.ties.removeValue(forKey: key) ?? [] }
    }

    func put(_ key: Key, _ value: Set<ExactName>) {
        state.withLock { $0.ties[key] = value }
    }

    /// The names `seen` at `key`'s time and those of the `page` read there since, or the page's
    /// alone past `maxTies`.
    func put(_ key: Key, seen: Set<ExactName>, adding page: [ExactName]) {
        var given = seen.union(page)
        if given.count > maxTies { given = Set(page.suffix(maxTies)) }
        put(key, given)
    }

    /// A marker of the slice at `key` was taken: the refusals before it led somewhere.
    func markerTaken(_ key: Key) {
        state.withLock { _ = $0.restarts.removeValue(forKey: key) }
    }

    /// Notes that the marker of the slice at `key` was refused; returns how often it was since
    /// one was last taken.
    func restarted(_ key: Key) -> Int {
        state.withLock { state in
            state.restarts[key, default: 0] += 1
            return state.restarts[key]!
        }
    }

    /// Notes whether a marker page of the slice at `key` gave anything it had not given;
    /// returns how many in a row gave nothing.
    func markerPage(_ key: Key, gaveNothingNew: Bool) -> Int {
        state.withLock { state in
            guard gaveNothingNew else {
                state.stale[key] = nil
                return 0
            }
            state.stale[key, default: 0] += 1
            return state.stale[key]!
        }
    }

    /// The ties as they stand, for a round to put back when it fails: the slices of the round
    /// that were read have already changed them, for pages that were never given.
    var ties: [Key: Set<ExactName>] {
        get { state.withLock { $0.ties } }
        set { state.withLock { $0.ties = newValue } }
    }

    // MARK: Notified deletions

    func noteDeletion(_ name: String) {
        state.withLock { state in
            state.pending.append(name)
            state.recent[ExactName(name)] = .now
            if state.pending.count > Self.maxDeletions { state.pending.removeFirst(state.pending.count - Self.maxDeletions) }
            if state.recent.count > Self.maxDeletions {
                let cutoff = ContinuousClock.now - Self.deletionMemory
                state.recent = state.recent.filter { $0.value > cutoff }
                if state.recent.count > Self.maxDeletions {
                    state.recent = Dictionary(
                        uniqueKeysWithValues: state.recent.sorted { $0.value > $1.value }.prefix(Self.maxDeletions).map { ($0.key, $0.value) })
                }
            }
        }
    }

    func takeDeletions() -> [String] {
        state.withLock { state in
            defer { state.pending.removeAll() }
            return state.pending
        }
    }

    func giveBack(_ names: [String]) {
        guard !names.isEmpty else { return }
        state.withLock { $0.pending = names + $0.pending }
    }

    /// Whether a version a query gave belongs to a record deleted by notification: one modified
    /// before the deletion was heard of (a version made since, by a re-creation, is new). The
    /// comparison takes the server's time against this machine's, so a version within a minute
    /// of the deletion is taken as new: a record re-created is never lost, at worst a deleted
    /// one lives on until the index catches up or a sweep.
    /// Whether any record was deleted by notification lately: when none was (always, outside
    /// `zonefeed watch`), a round checks nothing per record.
    var holdsDeletions: Bool { state.withLock { !$0.recent.isEmpty } }

    func isDeleted(_ name: String, modifiedMs: Int64?) -> Bool {
        state.withLock { state in
            guard let heard = state.recent[ExactName(name)] else { return false }
            guard ContinuousClock.now - heard < Self.deletionMemory else {
                state.recent[ExactName(name)] = nil
                return false
            }
            guard let modifiedMs else { return true }
            let heardMs = Int64(Date().timeIntervalSince1970 * 1000) - Int64((ContinuousClock.now - heard).seconds * 1000)
            return modifiedMs < heardMs - 60_000
        }
    }
}
