import Foundation
import Yams

extension Pipeline {
    /// The largest pipeline file read: 1 MiB. A real one is a few kilobytes (docs/pipeline-file.md's
    /// commented example is 4); a larger one is the wrong file, and reading on would only spend
    /// memory and time on it.
    public static let maxFileBytes = 1 << 20

    /// Reads and validates a pipeline file. Every problem in it is reported at once, each with its
    /// `file:line:column`, as one `PipelineFileError`; so is a file that cannot be read.
    ///
    /// `${VAR}` in a value is replaced from `environment` before the value is interpreted.
    /// `components` are the sources and the destination the file may name; each reads its own
    /// section.
    public static func load(
        path: String, components: PipelineComponents,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> Pipeline {
        let text: String
        switch readTextFile(atPath: path, maxBytes: maxFileBytes) {
        case .success(let contents): text = contents
        case .failure(let failure):
            let why = failure.tooLarge ? ", the most a pipeline file may be (one is a few kilobytes): check that this is the pipeline file" : ""
            throw PipelineFileError(diagnostics: [
                PipelineDiagnostic(file: path, line: 0, column: 0, message: "cannot read pipeline file: \(failure.reason)\(why)")
            ])
        }
        return try parse(yaml: text, filePath: path, components: components, environment: environment)
    }

    /// Validates a pipeline file's text; `filePath` is only used to name it in diagnostics.
    public static func parse(
        yaml: String, filePath: String, components: PipelineComponents, environment: [String: String]
    ) throws -> Pipeline {
        let reader = PipelineFileReader(yaml: yaml, filePath: filePath, environment: environment)
        // Refused before composing: composing is where nested aliases take exponential time.
        if let refused = reader.firstRefusedToken() {
            reader.report(refused.why, at: refused.position)
            throw PipelineFileError(diagnostics: reader.sortedDiagnostics)
        }
        let root: Node?
        do {
            root = try Yams.compose(yaml: yaml)
        } catch {
            reader.reportYAMLError(error)
            throw PipelineFileError(diagnostics: reader.sortedDiagnostics)
        }
        let pipeline = reader.readPipeline(root, components: components)
        guard let pipeline, reader.sortedDiagnostics.isEmpty else {
            throw PipelineFileError(diagnostics: reader.sortedDiagnostics)
        }
        return pipeline
    }
}

// MARK: - The engine's own keys

extension PipelineFileReader {
    /// The top level: `pipeline` and `source` are the engine's; `destination` and the keys the
    /// destination names are read by the destination, the other sections by their modules.
    func readPipeline(_ root: Node?, components: PipelineComponents) -> Pipeline? {
        guard let root else {
            report(
                "the pipeline file is empty: it needs at least 'pipeline', 'source' and 'destination'",
                at: PipelinePosition(line: 1, column: 1)
            )
            return nil
        }
        let destinationType = chooseDestination(in: root, among: components.destinations)
        let allowed =
            Pipeline.reference.keys.keys(in: "") + ["destination"] + (destinationType ?? components.destinations[0]).topLevelKeys
            + components.sections.map { $0.key }
        guard let top = section(root, path: "", position: PipelinePosition(root.mark), allowed: allowed)
        else { return nil }

        let name = readName(in: top)
        let source = readSource(in: top, pipelineName: name, sources: components.sources)
        let destination = destinationType?.read(top, pipelineName: name, from: self)
        var sections: [String: any SectionConfiguration] = [:]
        var sectionsRead = true
        for type in components.sections where top[type.key] != nil {
            if let section = type.read(top, pipelineName: name, from: self) { sections[type.key] = section } else { sectionsRead = false }
        }
        guard let name, let source, let destination, sectionsRead else { return nil }
        if let why = source.needsRecordTypes, destination.mappedRecordTypes == nil {
            report(
                "recordTypes: auto cannot be used with this source: \(why); list the record types under recordTypes, "
                    + "or derive them from a schema file (recordTypes: { schemaFile: schema.ckdb })",
                at: top["recordTypes"]?.valuePosition ?? top["source"]?.keyPosition ?? top.position)
            return nil
        }
        // A field mapped to a column but not fetched leaves its column empty for good: each
        // upsert writes the whole row.
        if let fetched = source.fetchedFields, let mapped = destination.mappedFields {
            let names = Set(fetched.names)
            let missing = mapped.sorted { $0.key < $1.key }.flatMap { type, fields in fields.filter { !names.contains($0) }.map { "\(type).\($0)" } }
            if !missing.isEmpty {
                let sourceKey = type(of: source).key
                let section = top["source"]?.value[sourceKey]
                let entry = section?[fetched.key]
                report(
                    "source.\(sourceKey).\(fetched.key) leaves out \(missing.prefix(10).joined(separator: ", "))"
                        + (missing.count > 10 ? " and \(missing.count - 10) more" : "")
                        + ", which recordTypes maps to columns: they would stay empty, since each upsert writes the whole row; "
                        + "add them, or leave \(fetched.key) out to fetch every field",
                    at: PipelinePosition((entry ?? section)?.mark))
                return nil
            }
        }
        return Pipeline(name: name, source: source, destination: destination, filePath: filePath, sections: sections)
    }

    func readName(in top: PipelineSection) -> String? {
        guard let value = text("pipeline", in: top, expected: "a name such as notes", required: true) else { return nil }
        let allowed = value.text.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || "_-.".unicodeScalars.contains($0)
        }
        if value.text.isEmpty {
            report("the pipeline name is empty", at: value.position)
            return nil
        }
        guard allowed else {
            report(
                "pipeline name \(InertText.quoted(value.text)) may hold only ASCII letters, digits, '_', '-' and '.'",
                at: value.position
            )
            return nil
        }
        guard value.text.utf8.count <= Pipeline.maxNameBytes else {
            report(
                "pipeline name \(InertText.quoted(value.text)) is \(value.text.utf8.count.grouped) bytes long; a pipeline name is at most "
                    + "\(Pipeline.maxNameBytes) (with a zone's names it keys the zone's checkpoint, in an index whose entries hold 2,704 bytes)",
                at: value.position
            )
            return nil
        }
        return value.text
    }

    /// The destination whose key `destination:` holds; the first the program knows when it
    /// holds none of theirs (which then reports what it misses); nil, reported, when it holds
    /// the keys of two.
    func chooseDestination(in root: Node, among destinations: [any DestinationConfiguration.Type]) -> (any DestinationConfiguration.Type)? {
        guard case .mapping(let top) = root, let section = top.first(where: { $0.key.string == "destination" })?.value,
            case .mapping(let keys) = section
        else { return destinations[0] }
        let named = keys.compactMap { key, _ in destinations.first { $0.key == key.string }.map { (type: $0, mark: key.mark) } }
        guard named.count > 1 else { return named.first?.type ?? destinations[0] }
        let both = named.map { "'\($0.type.key)'" }.joined(separator: " and ")
        report("destination has both \(both): a pipeline writes to exactly one destination", at: PipelinePosition(named[1].mark))
        return nil
    }

    /// Exactly one of the sources the program knows.
    func readSource(
        in top: PipelineSection, pipelineName: String?, sources: [any SourceConfiguration.Type]
    ) -> (any SourceConfiguration)? {
        let keys = sources.map { $0.key }
        guard let source = subsection("source", in: top, allowed: keys, required: true) else { return nil }
        let named = sources.filter { source[$0.key] != nil }
        guard let first = named.first else {
            report("source needs one of \(keys.map { "'\($0)'" }.joined(separator: " or "))", at: source.position)
            return nil
        }
        if named.count > 1 {
            let second = named.map { source[$0.key]! }.sorted { $0.keyPosition.line < $1.keyPosition.line }[1]
            let both = named.map { "'\($0.key)'" }.joined(separator: " and ")
            report("source has both \(both): a pipeline reads from exactly one source", at: second.keyPosition)
            // Each is still checked, so that fixing the file takes one round.
            for type in named { _ = type.read(source, pipelineName: pipelineName, from: self) }
            return nil
        }
        return first.read(source, pipelineName: pipelineName, from: self)
    }
}

extension Pipeline {
    /// The keys the engine itself reads (`zonefeed config reference`): the name and the choice
    /// of source; what is under a source is its own.
    public static let reference = PipelineReference(
        component: "pipeline (ZoneFeed)",
        keys: [
            PipelineKey(
                "pipeline", takes: "a name such as notes (ASCII letters, digits, '_', '-' and '.')", default: "required",
                "The pipeline's name: the key of its checkpoints and runs, and the default schema."),
            .section("source", default: "required", "Exactly one of the sources below."),
        ])
}
