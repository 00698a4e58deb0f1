import Logging

/// A source's settings, read from its section under `source:` by the module that implements it
/// (Vector's `SourceConfig`, Benthos' `ConfigSpec`): the engine only knows the section's name.
public protocol SourceConfiguration: Sendable {
    /// The key under `source:` that selects this source: `cloudkit`, `fake`.
    static var key: String { get }

    /// Reads `source.<key>` from `source`, reporting every problem to `file`; nil when there
    /// were problems. `pipelineName` is nil when the name itself was refused.
    static func read(_ source: PipelineSection, pipelineName: String?, from file: PipelineFileReader) -> Self?

    /// The zones the file names, when it names them rather than discovering them: a zone named
    /// there can be reset before it has ever been fetched.
    var namedZones: [String]? { get }

    /// Makes the source these settings describe, for one command. The caller calls its
    /// `shutdown()` on every path, and closes the context's vault after that. What blocks
    /// (reading the vault) runs on a pool for blocking work, never on a cooperative thread.
    func makeSource(_ context: SourceContext, logger: Logger) async throws -> any ChangeSource

    /// What `zonefeed validate` shows of the source. Never a secret: tokens are `<redacted>`.
    func plan(_ context: PlanContext) -> PlanSection

    /// What `zonefeed status` shows of the source under the pipeline's heading (who is signed
    /// in, and since when); none by default. Never a secret.
    func statusLines(_ context: StatusContext) async -> [String]

    /// Every key of `source.<key>` (`zonefeed config reference`).
    static var reference: PipelineReference { get }

    /// Why this source must be told which record types to read (it asks for records by type),
    /// as the end of a sentence; nil when it reads whatever comes. A pipeline whose destination
    /// maps no list of types (`recordTypes: auto`) is refused then.
    var needsRecordTypes: String? { get }

    /// Whether a person answers an authentication failure by signing in (`zonefeed login`);
    /// otherwise the failure's own words say what to fix (a server-to-server key).
    var signsIn: Bool { get }

    /// The fields it fetches when it fetches only some, with the key of its section that names
    /// them (CloudKit's `desiredKeys`); nil when it fetches every field.
    var fetchedFields: (key: String, names: [String])? { get }
}

extension SourceConfiguration {
    public var namedZones: [String]? { nil }
    public var fetchedFields: (key: String, names: [String])? { nil }
    public var needsRecordTypes: String? { nil }
    public var signsIn: Bool { true }
    public func statusLines(_ context: StatusContext) async -> [String] { [] }
}

/// A destination's settings, read by the module that implements it. Besides its `destination:`
/// section a destination reads the top-level keys that say how records become rows
/// (`recordTypes` and the record policies); the engine only needs how much to write at once.
public protocol DestinationConfiguration: Sendable {
    /// The key under `destination:` that says a file writes to this destination (PostgreSQL:
    /// `url`), as `source:`'s key names its source.
    static var key: String { get }

    /// The top-level keys besides `destination` that this destination reads.
    static var topLevelKeys: [String] { get }

    /// Reads `destination` and `topLevelKeys` from the top level, reporting every problem to
    /// `file`; nil when there were problems. `pipelineName` is nil when the name was refused.
    static func read(_ top: PipelineSection, pipelineName: String?, from file: PipelineFileReader) -> Self?

    /// Records per transaction; whole pages only, so a transaction may hold a little more.
    var commitEvery: Int { get }
    /// Bytes of pages per transaction, as they came; whole pages only.
    var commitEveryBytes: Int { get }
    /// How many zones are applied at once, each on a connection of its own.
    var parallelZones: Int { get }

    /// Where the destination keeps its source's vault, for plans (`table s.zonefeed_web_auth_tokens`);
    /// nil when it keeps none.
    func vaultLocation(pipelineName: String) -> String?

    /// Opens the destination for one command and runs `body` with it, closing it on every path
    /// (a server the destination runs itself is started first and stopped after). A destination
    /// that cannot be opened throws `DestinationUnavailableError`; the body's errors pass through.
    func open<T>(pipelineName: String, logger: Logger, _ body: (any OpenedDestination) async throws -> T) async throws -> T

    /// What `zonefeed validate` shows of the destination after the source: its lines, rows laid
    /// out with `PlanSection.line`. Never a secret: passwords are `<redacted>`.
    func plan(_ context: PlanContext) -> [String]

    /// What a run does to make the destination ready, for `zonefeed validate`; nil when nothing.
    func setup(pipelineName: String) -> DestinationSetup?

    /// Lines after a run's summary on how to look at what it wrote; none by default. `command`
    /// writes a zonefeed command on this pipeline as the person would type it into a shell,
    /// every argument quoted as it needs: `command("psql", ["-c", "SELECT 1"])` is
    /// `zonefeed psql pipelines/x.yml -c 'SELECT 1'`.
    func summaryHints(rejects: Int, command: (_ subcommand: String, _ arguments: [String]) -> String) -> [String]

    /// Every key of `destination` and of `topLevelKeys` (`zonefeed config reference`).
    static var reference: PipelineReference { get }

    /// The record types it maps, in the file's order; nil when it takes whatever comes
    /// (`recordTypes: auto`).
    var mappedRecordTypes: [String]? { get }

    /// The fields it writes to columns of their own, by record type; nil when it takes
    /// whatever comes (`recordTypes: auto`).
    var mappedFields: [String: [String]]? { get }

    /// The indexes the record types' schema file declares on system fields (`___modTime
    /// SORTABLE`), by record type; nil when the types do not come from a schema file.
    var declaredIndexes: [String: Set<String>]? { get }
}

extension DestinationConfiguration {
    public var commitEveryBytes: Int { Runner.Configuration.defaultCommitEveryBytes }
    public var mappedRecordTypes: [String]? { nil }
    public var mappedFields: [String: [String]]? { nil }
    public var declaredIndexes: [String: Set<String>]? { nil }
    public func vaultLocation(pipelineName: String) -> String? { nil }
    public func setup(pipelineName: String) -> DestinationSetup? { nil }
    public func summaryHints(rejects: Int, command: (_ subcommand: String, _ arguments: [String]) -> String) -> [String] { [] }
}

/// What a run does to make a destination ready (PostgreSQL: the DDL, each statement idempotent),
/// as `zonefeed validate` prints it: a heading, then each statement as it is written.
public struct DestinationSetup: Sendable {
    public var heading: String
    public var statements: [String]

    public init(heading: String, statements: [String]) {
        self.heading = heading
        self.statements = statements
    }
}

/// A top-level section read by a module that is neither the source nor the destination
/// (`metrics`): the engine only knows its key.
public protocol SectionConfiguration: Sendable {
    /// The top-level key of the section.
    static var key: String { get }

    /// Reads the section `key` of `top`, which is there, reporting every problem to `file`; nil
    /// when there were problems.
    static func read(_ top: PipelineSection, pipelineName: String?, from file: PipelineFileReader) -> Self?

    /// Every key of the section (`zonefeed config reference`).
    static var reference: PipelineReference { get }
}

/// What a pipeline file may name: the sources and destinations a program was built with and the
/// other sections it understands. Adding a source is a new module with a `SourceConfiguration`,
/// which reads its section, makes its source and describes it, and a line where the program
/// lists its components; a destination the same with a `DestinationConfiguration`, which opens
/// itself. No engine or command-line file changes.
public struct PipelineComponents: Sendable {
    public var sources: [any SourceConfiguration.Type]
    /// The first is the one a file's problems are reported for when its `destination:` names
    /// none of them by key.
    public var destinations: [any DestinationConfiguration.Type]
    public var sections: [any SectionConfiguration.Type]

    public init(
        sources: [any SourceConfiguration.Type], destinations: [any DestinationConfiguration.Type],
        sections: [any SectionConfiguration.Type] = []
    ) {
        precondition(!destinations.isEmpty, "a program writes to at least one kind of destination")
        self.sources = sources
        self.destinations = destinations
        self.sections = sections
    }

    /// Every key a pipeline file read with these components may hold, by the component that
    /// reads it: the engine's first, then each source's, the destinations' and the sections'.
    public var reference: [PipelineReference] {
        [Pipeline.reference] + sources.map { $0.reference } + destinations.map { $0.reference } + sections.map { $0.reference }
    }
}
