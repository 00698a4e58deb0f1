import CloudKitModel

/// A zone's change feed from a token: its pages one after another, each asked for with the token
/// the one before ended at, until a page says no more are coming.
///
/// `ChangeSource.zonePages(in:since:readingAhead:)` is the way to read it: the feed behind a
/// bounded buffer (`ZonePages`), so that the next pages are fetched while the engine writes the
/// last ones.
public struct ZoneChangeFeed: AsyncSequence, Sendable {
    public typealias Element = ZoneChangePage

    let source: any ChangeSource
    let zone: ZoneID
    let token: ChangeToken?

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(source: source, zone: zone, token: token)
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        let source: any ChangeSource
        let zone: ZoneID
        var token: ChangeToken?
        var finished = false

        public mutating func next() async throws -> ZoneChangePage? {
            guard !finished else { return nil }
            do {
                // The buffer's fetching task is cancelled when the reader goes away; a source
                // that answers without suspending would never notice otherwise, and fetch on.
                try Task.checkCancellation()
                let page = try await source.fetchZoneChanges(in: zone, since: token)
                token = page.syncToken
                finished = !page.moreComing
                return page
            } catch {
                finished = true
                throw error
            }
        }
    }
}

extension ChangeSource {
    /// The zone's pages after `token`, with up to `pages` of them fetched ahead of the reader,
    /// and no more once those waiting took `bytes` as they came (`ZonePages`: the fetching waits
    /// while the buffer is full, and stops when the reader goes away). A failure comes after the
    /// pages fetched before it.
    public func zonePages(in zone: ZoneID, since token: ChangeToken?, readingAhead pages: Int, bytes: Int = .max) -> ZonePages {
        ZonePages(feed: ZoneChangeFeed(source: self, zone: zone, token: token), limit: pages, byteLimit: bytes)
    }
}
