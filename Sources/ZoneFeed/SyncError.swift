import CloudKitModel

/// A failure the engine handles by its code: a source or a destination throws it for one zone,
/// and the runner resyncs the zone, treats it as deleted, stops the run for a person, or fails the
/// zone and goes on with the others. Any other error (the destination's connection failing, say)
/// stops the run.
public struct SyncError: Error, Sendable, CustomStringConvertible {
    /// A struct rather than an enum, so that a new code breaks no caller's switch.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        public let description: String
        private init(_ description: String) { self.description = description }

        /// The zone's token is no longer accepted: resync the zone.
        public static let changeTokenExpired = Code("changeTokenExpired")
        /// The zone is gone: handle as a zone deletion.
        public static let zoneNotFound = Code("zoneNotFound")
        /// A person must sign in again; the run stops (exit 3).
        public static let authenticationRequired = Code("authenticationRequired")
        /// The zone cannot go on (the source failed after its retries, a record does not fit and
        /// `onBadRecord` is `fail`, the checkpoint was moved under the run): the zone fails, the
        /// run goes on with the others and fails at the end.
        public static let failed = Code("failed")
    }

    public var code: Code
    public var zoneID: ZoneID?
    public var message: String
    /// The error this one stands for (a `CloudKitError`, say), for callers that want its own
    /// code; `message` is what is shown, and this never adds to it.
    public var underlying: (any Error & Sendable)?

    public init(_ code: Code, zoneID: ZoneID? = nil, message: String, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.zoneID = zoneID
        self.message = message
        self.underlying = underlying
    }

    public var description: String { message }
}
