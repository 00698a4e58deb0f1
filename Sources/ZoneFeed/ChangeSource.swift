import CloudKitModel

/// Where changes come from: the CloudKit Web Services client or the fake generator. A source
/// knows nothing of the destination; the engine asks it for pages from a token.
public protocol ChangeSource: Sendable {
    /// The caller's user record name (`users/caller`), asked once per run; nil when the source
    /// has no accounts.
    func currentUser() async throws -> String?

    /// The zones to follow when the pipeline names them (`zones: [A, B]`); nil means "discover
    /// them through the database change feed".
    var namedZones: [ZoneID]? { get }

    /// One page of the database change feed after `token` (nil: from the beginning).
    func fetchDatabaseChanges(since token: ChangeToken?) async throws -> DatabaseChangePage

    /// One page of a zone's change feed after `token` (nil: from the beginning).
    func fetchZoneChanges(in zone: ZoneID, since token: ChangeToken?) async throws -> ZoneChangePage

    /// How many zones are worth fetching at once, whatever the destination writes with: a source
    /// far away over the network keeps many requests in flight. nil: as many as the destination
    /// writes.
    var concurrentZones: Int? { get }

    /// The most entries one page of `zone` may hold, which bounds what the engine reads ahead.
    func entriesPerPage(in zone: ZoneID) -> Int

    /// The records named, as they are now: what a deletion sweep listed that has no row (a
    /// record the reads before did not see, such as one a query index took long to show). A
    /// record no longer there is left out. A source that cannot look records up gives none.
    func lookUpRecords(_ listed: [ListedRecords], in zone: ZoneID) async throws -> [RecordEntry]

    /// The most names one request of `lookUpRecords` asks for.
    var entriesPerLookup: Int { get }

    /// How long the source has waited so far because its server throttled it, in seconds.
    func throttledSeconds() async -> Double

    /// Gives back what the source holds (connections) and saves what must outlive the command
    /// (the newest web auth token). Called once, on every path, by whoever made the source.
    func shutdown() async throws
}

extension ChangeSource {
    public var concurrentZones: Int? { nil }
    /// CloudKit's largest `resultsLimit`.
    public func entriesPerPage(in zone: ZoneID) -> Int { 200 }
    public func lookUpRecords(_ listed: [ListedRecords], in zone: ZoneID) async throws -> [RecordEntry] { [] }
    public var entriesPerLookup: Int { 200 }
    public func throttledSeconds() async -> Double { 0 }
    public func shutdown() async throws {}
}
