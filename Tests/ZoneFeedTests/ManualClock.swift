import Testing

/// A clock that moves only when the test moves it. The standard library has no test clock and
/// the swift-clocks package is not available to this package, hence this one.
///
/// `sleep(until:)` suspends until `advance(by:)` reaches the deadline, or throws
/// `CancellationError` when the sleeping task is cancelled, as `ContinuousClock`'s does. A test
/// waits with `sleepers(wakingAt:)` until the code under test is suspended on the clock, and only
/// then advances it: so nothing depends on how fast the machine is.
final class ManualClock: Clock, Sendable {
    struct Instant: InstantProtocol, CustomStringConvertible {
        /// Since the clock was made.
        var offset: Duration

        func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        func duration(to other: Instant) -> Duration { other.offset - offset }
        static func < (a: Instant, b: Instant) -> Bool { a.offset < b.offset }
        var description: String { "\(offset)" }
    }

    private struct Sleeper {
        var deadline: Instant
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var now = Instant(offset: .zero)
        var sleepers: [Int: Sleeper] = [:]
        var nextID = 0
        /// Sleeps cancelled before they were registered.
        var cancelled: Set<Int> = []

        var deadlines: [Duration] { sleepers.values.map(\.deadline.offset).sorted() }
    }

    private let state = Observed(State())

    var now: Instant { state.current.now }
    var minimumResolution: Duration { .zero }

    /// The deadlines the sleeping tasks wait for, earliest first, as times since the clock was
    /// made.
    var deadlines: [Duration] { state.current.deadlines }

    func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        let id = state.update { state in
            state.nextID += 1
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let early: Result<Void, any Error>? = state.update { state in
                    if state.cancelled.remove(id) != nil { return .failure(CancellationError()) }
                    if deadline <= state.now { return .success(()) }
                    state.sleepers[id] = Sleeper(deadline: deadline, continuation: continuation)
                    return nil
                }
                if let early { continuation.resume(with: early) }
            }
        } onCancel: {
            let sleeper = state.update { state in
                guard let sleeper = state.sleepers.removeValue(forKey: id) else {
                    state.cancelled.insert(id)
                    return Sleeper?.none
                }
                return sleeper
            }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves the time on and wakes, earliest first, the sleepers whose deadline it reaches.
    func advance(by duration: Duration) {
        let due = state.update { state in
            state.now = state.now.advanced(by: duration)
            let now = state.now
            let due = state.sleepers.filter { $0.value.deadline <= now }.sorted { $0.value.deadline < $1.value.deadline }
            for (id, _) in due { state.sleepers[id] = nil }
            return due.map(\.value.continuation)
        }
        for continuation in due { continuation.resume() }
    }

    /// Returns once the tasks asleep on the clock are exactly those waking at `deadlines` (times
    /// since the clock was made, in any order); fails the test when they are not within seconds.
    func sleepers(wakingAt deadlines: Duration..., sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let expected = deadlines.sorted()
        let met = await state.wait { $0.deadlines == expected }
        try #require(met, "asleep on the clock until \(expected), not \(self.deadlines), at \(now)", sourceLocation: sourceLocation)
    }
}
