import CloudKitModel
import Logging

/// A destination its settings opened for one command (`DestinationConfiguration.open`): what
/// `run`, `watch`, `status`, `reset`, `login` and `psql` ask of it, whatever it writes to. The
/// commands know this protocol only, never the destination's module.
public protocol OpenedDestination: Sendable {
    /// A destination for one run (the runner's four roles), on connections of its own; the
    /// caller closes it when the run has ended.
    func runDestination(logger: Logger) -> any RunDestination

    /// The vault it keeps for the pipeline's source; nil when it keeps none.
    var sourceVault: (any SourceVault)? { get }

    /// What `zonefeed status` shows: the checkpoints, the last runs and what else it keeps.
    func status() async throws -> PipelineStatus

    /// Marks zones for a resync from a nil token under a new generation (`zonefeed reset`); a
    /// zone being applied right now is left alone and reported. `all` also forgets the database
    /// token, so that zones are rediscovered; with `addingUnknownZones` (the source names its
    /// zones in the file) a zone named that has no checkpoint yet gets one that starts as a resync.
    func reset(zoneNames: [String], all: Bool, addingUnknownZones: Bool) async throws -> ResetOutcome

    /// Runs `body` with the destination's own interactive client (`zonefeed psql`) and
    /// `arguments` for it, cleaning up after it on every path; nil when the destination has none.
    func withShell<T: Sendable>(arguments: [String], _ body: (DestinationShell) async throws -> T) async throws -> T?
}

/// A destination for one run: the runner's four roles, and what it holds open.
public protocol RunDestination: RunLedger, CheckpointStore, ZoneClaims, BatchSink {
    /// Gives back its connections; the run has ended.
    func close() async
}

/// A destination's interactive client, ready to run: the command line starts it attached to the
/// terminal and waits for it.
public struct DestinationShell: Sendable {
    /// The program, looked up on `PATH`.
    public var program: String
    /// Its arguments: never a secret, as any local user may read them (`ps`).
    public var arguments: [String]
    /// Variables to set (a value) or to remove (nil) in the environment it inherits.
    public var environment: [String: String?]
    /// What to do when the program cannot be started (`install the postgresql-client package`).
    public var installAdvice: String

    public init(program: String, arguments: [String], environment: [String: String?], installAdvice: String) {
        self.program = program
        self.arguments = arguments
        self.environment = environment
        self.installAdvice = installAdvice
    }
}

/// `zonefeed reset`'s outcome: the zones marked, the names with no checkpoint, and the zones a
/// run was applying, left alone.
public struct ResetOutcome: Sendable, Equatable {
    public var reset: [ZoneID] = []
    public var unknown: [String] = []
    public var busy: [ZoneID] = []

    public init(reset: [ZoneID] = [], unknown: [String] = [], busy: [ZoneID] = []) {
        self.reset = reset
        self.unknown = unknown
        self.busy = busy
    }
}

/// A destination that could not be opened (an embedded server that would not start, a folder
/// it cannot use): the command says the sentence and exits 1.
public struct DestinationUnavailableError: Error, Sendable, CustomStringConvertible {
    /// A struct rather than an enum, so that a new code breaks no caller's switch.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        public let description: String
        private init(_ description: String) { self.description = description }

        /// The server the destination runs for the pipeline (`url: embedded`) did not start.
        public static let serverDidNotStart = Code("serverDidNotStart")
    }

    public var code: Code
    public var description: String

    public init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }
}
