/// Which zones of the database a pipeline reads.
public enum ZoneSelection: Sendable, Equatable {
    /// Discover zones through the database change feed.
    case all
    case named([String])
}
