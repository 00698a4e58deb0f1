import CloudKitModel
import Synchronization

/// A zone's pages with up to `limit` of them fetched ahead of the reader: the fetching waits
/// while that many wait to be read, or while those waiting took `byteLimit` bytes as they came
/// (`ZoneChangePage.byteCount`: large records hold memory by their pages); a failure comes after
/// the pages fetched before it; and when the reader goes away (its iterator is released) or its
/// task is cancelled, the fetch under way is cancelled and nothing more is fetched.
///
/// Hand-written rather than swift-async-algorithms' `buffer(policy: .bounded(_:))`, whose
/// fetching task holds its own storage: released by its reader, it is neither cancelled nor
/// freed, and waits for room for ever once its fetch ends (`ZoneChangeFeedTests` shows the
/// difference: a fetch under way when the reader goes away must be cancelled).
public struct ZonePages: AsyncSequence, Sendable {
    public typealias Element = ZoneChangePage

    let feed: ZoneChangeFeed
    let limit: Int
    var byteLimit = Int.max

    public func makeAsyncIterator() -> Iterator {
        Iterator(readAhead: PageReadAhead(feed: feed, limit: Swift.max(1, limit), byteLimit: byteLimit))
    }

    public struct Iterator: AsyncIteratorProtocol {
        let readAhead: PageReadAhead

        public mutating func next() async throws -> ZoneChangePage? {
            try await readAhead.next()
        }
    }
}

/// The fetching of a `ZonePages` iterator, which alone holds it: its release cancels the task.
final class PageReadAhead: Sendable {
    /// What the task and the reader share; the task holds this, never the `PageReadAhead`.
    final class Shared: Sendable {
        struct State {
            /// Pages fetched and not yet read; then, once the feed has ended, how it ended.
            var pages: [ZoneChangePage] = []
            /// The bytes those pages came in.
            var bytes = 0
            var end: Result<Void, any Error>?
            var reader: CheckedContinuation<Result<ZoneChangePage?, any Error>, Never>?
            var fetcher: CheckedContinuation<Void, Never>?
        }

        let limit: Int
        let byteLimit: Int
        let state = Mutex(State())

        init(limit: Int, byteLimit: Int) {
            self.limit = limit
            self.byteLimit = byteLimit
        }

        /// Until fewer than `limit` pages wait to be read and they take fewer than `byteLimit`
        /// bytes, or the fetching is stopped.
        func waitForRoom() async {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                // The stop's cancellation comes before its `releaseFetcher`: seen here, or the
                // continuation is stored before that runs.
                let room = state.withLock { state in
                    guard state.pages.count >= limit || state.bytes >= byteLimit, !Task.isCancelled else { return true }
                    state.fetcher = continuation
                    return false
                }
                if room { continuation.resume() }
            }
        }

        /// A page fetched, or the end of the feed (nil) or its failure: to the waiting reader,
        /// else into the buffer.
        func deliver(_ result: Result<ZoneChangePage?, any Error>) {
            let reader = state.withLock { state -> CheckedContinuation<Result<ZoneChangePage?, any Error>, Never>? in
                if let reader = state.reader {
                    state.reader = nil
                    // An end or a failure handed over is said once; the feed has ended after it.
                    if case .success(.some) = result {} else { state.end = .success(()) }
                    return reader
                }
                switch result {
                case .success(let page?):
                    state.pages.append(page)
                    state.bytes += page.byteCount
                case .success(nil): state.end = .success(())
                case .failure(let error): state.end = .failure(error)
                }
                return nil
            }
            reader?.resume(returning: result)
        }

        /// Lets a fetcher waiting for room go on (to find its task cancelled).
        func releaseFetcher() {
            state.withLock { state in
                defer { state.fetcher = nil }
                return state.fetcher
            }?.resume()
        }

        /// The next page in the buffer, the end, or a wait for the fetcher.
        func take(_ reader: CheckedContinuation<Result<ZoneChangePage?, any Error>, Never>) {
            let (answer, fetcher) = state.withLock { state -> (Result<ZoneChangePage?, any Error>?, CheckedContinuation<Void, Never>?) in
                if !state.pages.isEmpty {
                    let fetcher = state.fetcher
                    state.fetcher = nil
                    let page = state.pages.removeFirst()
                    state.bytes -= page.byteCount
                    return (.success(page), fetcher)
                }
                switch state.end {
                case .success?: return (.success(nil), nil)
                case .failure(let error)?:
                    // Said once; the feed has ended after it.
                    state.end = .success(())
                    return (.failure(error), nil)
                case nil:
                    state.reader = reader
                    return (nil, nil)
                }
            }
            fetcher?.resume()
            if let answer { reader.resume(returning: answer) }
        }
    }

    let shared: Shared
    let task: Task<Void, Never>

    init(feed: ZoneChangeFeed, limit: Int, byteLimit: Int) {
        let shared = Shared(limit: limit, byteLimit: byteLimit)
        self.shared = shared
        task = Task {
            var pages = feed.makeAsyncIterator()
            while true {
                await shared.waitForRoom()
                let result: Result<ZoneChangePage?, any Error>
                do {
                    try Task.checkCancellation()
                    result = .success(try await pages.next())
                } catch {
                    result = .failure(error)
                }
                shared.deliver(result)
                guard case .success(.some) = result else { return }
            }
        }
    }

    deinit {
        task.cancel()
        shared.releaseFetcher()
    }

    /// The next page, nil after the last; a cancelled reader cancels the fetching, and then
    /// gets its `CancellationError`.
    func next() async throws -> ZoneChangePage? {
        let task = self.task
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { reader in shared.take(reader) }
        } onCancel: {
            task.cancel()
            shared.releaseFetcher()
        }
        return try result.get()
    }
}
