import Yams

/// A place in a pipeline file, 1-based like Yams' `Mark` (whose initializer is not public).
public struct PipelinePosition: Sendable, Hashable {
    public var line: Int
    public var column: Int

    public init(line: Int, column: Int) {
        self.line = line
        self.column = column
    }

    init(_ mark: Mark?) {
        self.init(line: mark?.line ?? 0, column: mark?.column ?? 0)
    }
}

/// A value after `${VAR}` substitution, with where it was written.
public struct PipelineValue: Sendable {
    public var text: String
    public var position: PipelinePosition
}

/// One `key: value` of a mapping.
public struct PipelineEntry {
    public var key: String
    public var keyPosition: PipelinePosition
    public var value: Node
    public var valuePosition: PipelinePosition { PipelinePosition(value.mark) }
}

/// A mapping whose keys were checked against the ones allowed there: what a component is handed
/// to read its settings from.
public struct PipelineSection {
    /// `source.cloudkit`; empty at the top level.
    public var path: String
    /// Where a missing key is reported: the key that introduces this mapping.
    public var position: PipelinePosition
    public var entries: [String: PipelineEntry] = [:]

    public subscript(key: String) -> PipelineEntry? { entries[key] }

    public func path(of key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    /// "in source.cloudkit", or "at the top level".
    public var whereabouts: String { path.isEmpty ? "at the top level" : "in \(path)" }
}
