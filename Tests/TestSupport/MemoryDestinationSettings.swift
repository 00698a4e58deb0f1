import Logging
import Synchronization
import ZoneFeed

/// `destination: { memory: NAME }`: the in-memory destination as a component of its own, so that
/// a test runs the commands (`run`, `status`, `reset`) on it through the same code as on
/// PostgreSQL. The destinations of one name share one `MemoryDestination` within the process, as
/// the commands run on one database share it.
public struct MemoryDestinationSettings: DestinationConfiguration {
    public static let key = "memory"
    public static let topLevelKeys: [String] = []
    public static let reference = PipelineReference(
        component: "memory (tests only)",
        keys: [
            .section("destination", "Where the pipeline writes."),
            PipelineKey("destination.memory", takes: "a name", "The store: the destinations of one name share it within the process."),
            .integer("destination.commitEvery", 1...1_000_000, default: 5_000, "Records per batch."),
        ])

    public var name: String
    public var commitEvery = 5_000
    public var parallelZones = 1

    public init(name: String) {
        self.name = name
    }

    public static func read(_ top: PipelineSection, pipelineName: String?, from file: PipelineFileReader) -> MemoryDestinationSettings? {
        guard let section = file.subsection("destination", in: top, allowed: reference.keys.keys(in: "destination"), required: true),
            let name = file.nonEmptyText("memory", in: section, expected: "a name")
        else { return nil }
        var settings = MemoryDestinationSettings(name: name)
        if let commitEvery = file.integer("commitEvery", in: section, range: 1...1_000_000) { settings.commitEvery = commitEvery }
        return settings
    }

    /// The stores by name, for as long as the process lives.
    private static let stores = Mutex<[String: MemoryDestination]>([:])

    /// The store the destinations named `name` write to.
    public static func store(named name: String) -> MemoryDestination {
        stores.withLock { stores in
            if let store = stores[name] { return store }
            let store = MemoryDestination()
            stores[name] = store
            return store
        }
    }

    public func open<T>(pipelineName: String, logger: Logger, _ body: (any OpenedDestination) async throws -> T) async throws -> T {
        try await body(MemoryOpenedDestination(name: name, store: Self.store(named: name)))
    }

    public func plan(_ context: PlanContext) -> [String] {
        ["destination: memory", PlanSection.line("memory", name), PlanSection.line("commitEvery", "\(commitEvery) records per batch")]
    }
}

/// A memory store opened for one command: every run writes to it; it keeps no vault and has no
/// interactive client.
struct MemoryOpenedDestination: OpenedDestination {
    let name: String
    let store: MemoryDestination

    var sourceVault: (any SourceVault)? { nil }

    func runDestination(logger: Logger) -> any RunDestination { store }

    func status() async throws -> PipelineStatus { await store.status(place: "memory \(name)") }

    func reset(zoneNames: [String], all: Bool, addingUnknownZones: Bool) async throws -> ResetOutcome {
        await store.reset(zoneNames: zoneNames, all: all, addingUnknownZones: addingUnknownZones)
    }

    func withShell<T: Sendable>(arguments: [String], _ body: (DestinationShell) async throws -> T) async throws -> T? { nil }
}
