/// Why a run stopped, with the exit code the command line gives it.
public struct RunError: Error, Sendable, CustomStringConvertible {
    /// A struct rather than an enum, so that a new kind breaks no caller's switch.
    public struct Kind: Sendable, Hashable, CustomStringConvertible {
        public let description: String
        private init(_ description: String) { self.description = description }

        public static let failed = Kind("failed")
        /// A person must sign in again (exit 3).
        public static let authentication = Kind("authentication")
        /// The checkpoints belong to another CloudKit account.
        public static let accountChanged = Kind("accountChanged")
        /// SIGINT or SIGTERM stopped the run between batches.
        public static let interrupted = Kind("interrupted")
        /// The pipeline or the command line asked for something impossible (exit 2).
        public static let usage = Kind("usage")
    }

    public var kind: Kind
    public var summary: RunSummary?
    public var message: String

    public init(_ kind: Kind, summary: RunSummary?, message: String) {
        self.kind = kind
        self.summary = summary
        self.message = message
    }

    public var description: String { message }
}
