import Foundation

/// Text a destination keeps for the pipeline's source between runs, in its own storage (the
/// PostgreSQL destination: the pipeline's row of `zonefeed_web_auth_tokens`), for a source whose
/// secrets must outlive a pod with no disk. It holds secrets and never prints them.
public protocol SourceVault: Sendable {
    /// Where the text is kept, for messages: never the text.
    var location: String { get }

    /// What was saved last; nil when nothing was.
    func load() throws -> String?

    /// Replaces what is saved; durable once this returns.
    func save(_ text: String) throws

    /// Replaces what is saved with what `change` makes of it, durable once this returns, with
    /// no save by another process in between (the replicas of a Deployment share a vault).
    func update(_ change: (String?) throws -> String) throws

    /// Gives back what the vault holds open (a connection). It may be used again after.
    func close()
}

/// What a source is made with besides its own settings: which pipeline it serves, and the
/// vault its destination keeps for it.
public struct SourceContext: Sendable {
    public var pipelineName: String
    /// nil when the destination keeps nothing for its source.
    public var vault: (any SourceVault)?
    /// The record types the destination maps (`DestinationConfiguration.mappedRecordTypes`),
    /// for a source that reads by type; nil when it takes whatever comes.
    public var recordTypes: [String]?

    public init(pipelineName: String, vault: (any SourceVault)? = nil, recordTypes: [String]? = nil) {
        self.pipelineName = pipelineName
        self.vault = vault
        self.recordTypes = recordTypes
    }
}

/// What `zonefeed validate` prints of a component: a heading (`source: CloudKit Web Services`)
/// and labelled rows, laid out by the command.
public struct PlanSection: Sendable, Equatable {
    public struct Row: Sendable, Equatable {
        /// Empty for a row that goes on the one before.
        public var label: String
        public var value: String
    }

    public var heading: String
    public var rows: [Row] = []

    public init(heading: String) {
        self.heading = heading
    }

    public mutating func row(_ label: String, _ value: String) {
        rows.append(Row(label: label, value: value))
    }

    /// A row as `zonefeed validate` prints it: indented, the label and its colon padded to a
    /// column (a longer label keeps a space after its colon), then the value.
    public static func line(_ label: String, _ value: String) -> String {
        let head = label.isEmpty ? "" : label + ":"
        return "  " + head.padding(toLength: max(20, head.count + 1), withPad: " ", startingAt: 0) + value
    }
}

/// What a component's plan may say of the others: where the destination keeps the source's
/// vault, for a source that uses one.
public struct PlanContext: Sendable {
    public var pipelineName: String
    /// The destination's words for where it keeps the source's vault (`table s.zonefeed_web_auth_tokens`);
    /// nil when it keeps none.
    public var vaultLocation: String?
    /// `DestinationConfiguration.declaredIndexes`: what a schema file says CloudKit indexes.
    public var declaredIndexes: [String: Set<String>]?

    public init(pipelineName: String, vaultLocation: String?, declaredIndexes: [String: Set<String>]? = nil) {
        self.pipelineName = pipelineName
        self.vaultLocation = vaultLocation
        self.declaredIndexes = declaredIndexes
    }
}

/// What a source's lines in `zonefeed status` may use: the vault its destination keeps for it,
/// and how to write a command on this pipeline for the advice it gives.
public struct StatusContext: Sendable {
    public var pipelineName: String
    /// nil when the destination keeps nothing for its source.
    public var vault: (any SourceVault)?
    /// A zonefeed command on this pipeline as the person would type it: `command("login")` is
    /// `zonefeed login pipelines/x.yml`.
    public var command: @Sendable (String) -> String
    /// The time the lines are written at, for "5 min ago".
    public var now: Date

    public init(pipelineName: String, vault: (any SourceVault)?, now: Date = Date(), command: @escaping @Sendable (String) -> String) {
        self.pipelineName = pipelineName
        self.vault = vault
        self.now = now
        self.command = command
    }
}
