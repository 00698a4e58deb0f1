import Yams

/// Walks the composed YAML tree by hand (rather than through Codable) so that every problem is
/// reported at the node it concerns, and collects them all instead of stopping at the first.
public final class PipelineFileReader {
    public let filePath: String
    public let environment: [String: String]
    /// The file's lines, to find the column of a `${` inside a scalar.
    let lines: [[Unicode.Scalar]]
    let yaml: String
    public private(set) var diagnostics: [PipelineDiagnostic] = []

    public init(yaml: String, filePath: String, environment: [String: String]) {
        self.yaml = yaml
        self.filePath = filePath
        self.environment = environment
        self.lines = yaml.unicodeScalars.split(separator: "\n", omittingEmptySubsequences: false).map(Array.init)
    }

    public var sortedDiagnostics: [PipelineDiagnostic] { PipelineFileError.sorted(diagnostics) }

    public func report(_ message: String, at position: PipelinePosition) {
        diagnostics.append(
            PipelineDiagnostic(file: filePath, line: position.line, column: position.column, message: message)
        )
    }

    /// A problem in another file the pipeline file names (a schema file, say).
    public func report(_ diagnostic: PipelineDiagnostic) {
        diagnostics.append(diagnostic)
    }

    // MARK: YAML syntax

    public func reportYAMLError(_ error: any Error) {
        guard let error = error as? YamlError else {
            report("invalid YAML: \(error)", at: PipelinePosition(line: 1, column: 1))
            return
        }
        // Only libyaml's problem and context sentences are used: Yams' own descriptions quote
        // the offending lines, and those may hold a secret.
        func sentence(_ problem: String, _ context: YamlError.Context?) -> String {
            guard let context else { return "invalid YAML: \(problem)" }
            return "invalid YAML: \(problem) (\(context.text) at line \(context.mark.line), column \(context.mark.column))"
        }
        switch error {
        case .scanner(let context, let problem, let mark, _),
            .parser(let context, let problem, let mark, _),
            .composer(let context, let problem, let mark, _):
            report(sentence(problem, context), at: PipelinePosition(mark))
        case .reader(let problem, let offset, _, _):
            report("invalid YAML: \(problem)", at: position(ofCharacterOffset: offset ?? 0))
        case .duplicatedKeysInMapping(let duplicates, let context):
            // A file of a million repeated keys names a few of them, not a million.
            var keys = duplicates.prefix(5).map { InertText.quoted($0) }.joined(separator: ", ")
            if duplicates.count > 5 { keys += " and \((duplicates.count - 5).grouped) more" }
            let subject = duplicates.count == 1 ? "key \(keys) appears" : "keys \(keys) appear"
            report("\(subject) more than once in the same mapping", at: PipelinePosition(context.mark))
        default:
            report("invalid YAML: \(error)", at: PipelinePosition(line: 1, column: 1))
        }
    }

    private func position(ofCharacterOffset offset: Int) -> PipelinePosition {
        var line = 1
        var column = 1
        for character in yaml.prefix(offset) {
            if character.isNewline {
                line += 1
                column = 1
            } else {
                column += character.unicodeScalars.count
            }
        }
        return PipelinePosition(line: line, column: column)
    }

    // MARK: Mappings

    /// The entries of a mapping in file order; `what` describes the mapping expected.
    public func entries(of node: Node, path: String, what: String) -> [PipelineEntry]? {
        guard case .mapping(let mapping) = node else {
            report("\(path.isEmpty ? "the pipeline file" : path) must be \(what), not \(kindName(node))", at: PipelinePosition(node.mark))
            return nil
        }
        var result: [PipelineEntry] = []
        // YAML tells keys apart by their tags too (`On` is a boolean, `"On"` a string, `!x url`
        // is not `url`), and so Yams lets such twins through; read as names, the second
        // replaced the first without a word.
        var seen: Set<String> = []
        for (key, value) in mapping {
            guard case .scalar(let scalar) = key else {
                report("a key in \(path.isEmpty ? "the pipeline file" : path) is \(kindName(key)); keys must be plain names", at: PipelinePosition(key.mark))
                continue
            }
            guard seen.insert(scalar.string).inserted else {
                report("key \(InertText.quoted(scalar.string)) appears more than once in the same mapping", at: PipelinePosition(scalar.mark))
                continue
            }
            result.append(PipelineEntry(key: scalar.string, keyPosition: PipelinePosition(scalar.mark), value: value))
        }
        return result
    }

    /// A mapping with a fixed set of keys; an unknown key is reported with the closest allowed one.
    /// A null value (`fake:` with nothing after it) reads as an empty mapping.
    public func section(_ node: Node, path: String, position: PipelinePosition, allowed: [String]) -> PipelineSection? {
        var section = PipelineSection(path: path, position: position)
        if isNull(node) { return section }
        let expected = "a mapping with keys such as \(allowed.prefix(3).joined(separator: ", "))"
        guard let pairs = entries(of: node, path: path, what: expected) else { return nil }
        for entry in pairs {
            guard allowed.contains(entry.key) else {
                var message = "unknown key \(InertText.quoted(entry.key)) \(section.whereabouts)"
                if let suggestion = NameSuggestion.closest(to: entry.key, among: allowed) {
                    message += " (did you mean '\(suggestion)'?)"
                } else {
                    message += " (expected \(NameSuggestion.alternatives(allowed, conjunction: "or")))"
                }
                report(message, at: entry.keyPosition)
                continue
            }
            section.entries[entry.key] = entry
        }
        return section
    }

    public func subsection(_ key: String, in parent: PipelineSection, allowed: [String], required: Bool) -> PipelineSection? {
        guard let entry = parent[key] else {
            if required { report("missing required key '\(key)' \(parent.whereabouts)", at: parent.position) }
            return nil
        }
        return section(entry.value, path: parent.path(of: key), position: entry.keyPosition, allowed: allowed)
    }
}
