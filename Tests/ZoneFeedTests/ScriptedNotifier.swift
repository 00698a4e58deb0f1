import Logging
import Testing
import ZoneFeed

/// A `ChangeNotifying` source that the test drives: it counts the watcher's `follow` calls and
/// listens, sends the hints the test asks for, says when the watcher has handled them, and fails
/// when told to, as a subscription endpoint or a courier that went away.
final class ScriptedNotifier: ChangeNotifying {
    struct State {
        var follows = 0
        /// How many times the watcher asked for the hints.
        var listens = 0
        /// While true, `follow` throws.
        var unavailable = false
        /// The hints sent on the current listen, and how many times the watcher asked it for one.
        var sent = 0, asks = 0
        var hints: AsyncThrowingStream<ChangeHint, any Error>.Continuation?
    }

    let state: Observed<State>

    init(unavailable: Bool = false) { state = Observed(State(unavailable: unavailable)) }

    func follow(logger: Logger) async throws {
        try state.update { state in
            state.follows += 1
            if state.unavailable { throw WatchError(.notificationsEnded, "the subscriptions could not be made (scripted)") }
        }
    }

    /// The hints the test sends, through a stream that counts the watcher's requests for the next
    /// one: when it asks again, it has done all it does with the hint before.
    func changeHints(logger: Logger) -> AsyncThrowingStream<ChangeHint, any Error> {
        let (hints, continuation) = AsyncThrowingStream.makeStream(of: ChangeHint.self)
        let iterator = Iterator(hints.makeAsyncIterator())
        state.update { state in
            state.listens += 1
            (state.sent, state.asks) = (0, 0)
            state.hints = continuation
        }
        return AsyncThrowingStream { [state] in
            state.update { $0.asks += 1 }
            return try await iterator.next()
        }
    }

    /// Sends a hint on the stream the watcher listens to now.
    func send(_ kind: ChangeHint.Kind) {
        let hints = state.update { state in
            state.sent += 1
            return state.hints
        }
        hints?.yield(ChangeHint(zone: nil, kind: kind))
    }

    /// Ends the stream the watcher listens to now with an error, as a courier that went away.
    func failHints() { state.current.hints?.finish(throwing: WatchError(.notificationsEnded, "the courier went away (scripted)")) }

    /// Returns once the watcher has asked for the hints `count` times in all.
    func listening(_ count: Int = 1, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let met = await state.wait { $0.listens == count }
        try #require(met, "the watcher listens \(count) times, not \(state.current.listens)", sourceLocation: sourceLocation)
    }

    /// Returns once the watcher has handled every hint sent and waits for the next.
    func handled(sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let met = await state.wait { $0.asks == $0.sent + 1 }
        let state = state.current
        try #require(met, "the watcher handled the \(state.sent) hints sent; it asked for \(state.asks)", sourceLocation: sourceLocation)
    }

    /// The stream's iterator, which only the watcher's listening task moves on.
    private final class Iterator: @unchecked Sendable {
        var base: AsyncThrowingStream<ChangeHint, any Error>.Iterator
        init(_ base: AsyncThrowingStream<ChangeHint, any Error>.Iterator) { self.base = base }
        func next() async throws -> ChangeHint? { try await base.next() }
    }
}
