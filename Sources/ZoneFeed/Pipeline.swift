/// A pipeline file, loaded and validated: its name, where changes come from and where they go.
/// Built by `Pipeline.load(path:components:environment:)`; each component's settings are its
/// own type, read by its own module.
public struct Pipeline: Sendable {
    /// The pipeline's name: the key of its checkpoints and runs.
    public var name: String
    /// The most bytes a pipeline's name takes (`Pipeline.load` refuses a longer one).
    public static let maxNameBytes = 200
    public var source: any SourceConfiguration
    public var destination: any DestinationConfiguration
    /// The path the file was read from, as given ("<memory>" when parsed from a string).
    public var filePath: String
    /// The other sections the file holds (`metrics`), by key.
    public var sections: [String: any SectionConfiguration]

    public init(
        name: String, source: any SourceConfiguration, destination: any DestinationConfiguration,
        filePath: String = "<memory>", sections: [String: any SectionConfiguration] = [:]
    ) {
        self.name = name
        self.source = source
        self.destination = destination
        self.filePath = filePath
        self.sections = sections
    }

    /// The section of that type, when the file has it.
    public func section<S: SectionConfiguration>(_ type: S.Type) -> S? {
        sections[S.key] as? S
    }

    /// The destination's settings as the type a destination module expects.
    public func destination<D: DestinationConfiguration>(as type: D.Type) throws -> D {
        guard let settings = destination as? D else {
            throw PipelineComponentError(
                .wrongDestinationType, "pipeline \(name) writes to a destination of type \(Swift.type(of: destination)), not \(D.self)")
        }
        return settings
    }
}

/// A pipeline handed to a component that was not built for it.
public struct PipelineComponentError: Error, Sendable, CustomStringConvertible {
    /// A struct rather than an enum, so that a new code breaks no caller's switch.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        public let description: String
        private init(_ description: String) { self.description = description }

        /// The pipeline's destination settings are of another type than the module expects.
        public static let wrongDestinationType = Code("wrongDestinationType")
    }

    public var code: Code
    public var description: String

    public init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }
}

extension String {
    /// Without leading and trailing white space.
    public func trimmingSpaces() -> String {
        var s = Substring(self)
        while s.first?.isWhitespace == true { s = s.dropFirst() }
        while s.last?.isWhitespace == true { s = s.dropLast() }
        return String(s)
    }
}
