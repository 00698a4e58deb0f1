import Foundation

/// One key of the pipeline file as `zonefeed config reference` prints it: its path, what it
/// takes, its default and what it does. Each component lists the keys it reads
/// (`reference`); its reader refuses any other key under its sections, so the reference and
/// what is read cannot part.
public struct PipelineKey: Sendable, Equatable {
    /// Dotted, from the top: `source.cloudkit.resultsLimit`; `<RecordType>` where a name goes.
    public var path: String
    /// What it takes, in the words of the diagnostic that refuses anything else.
    public var takes: String
    /// `required`, a value, or what happens when it is left out.
    public var defaultValue: String
    public var meaning: String

    public init(_ path: String, takes: String, default defaultValue: String = "none", _ meaning: String) {
        self.path = path
        self.takes = takes
        self.defaultValue = defaultValue
        self.meaning = meaning
    }

    /// A section: what it holds is listed below it.
    public static func section(_ path: String, default defaultValue: String = "none", _ meaning: String) -> PipelineKey {
        PipelineKey(path, takes: "a section", default: defaultValue, meaning)
    }

    public static func integer(_ path: String, _ range: ClosedRange<Int>, default defaultValue: Int?, _ meaning: String) -> PipelineKey {
        PipelineKey(path, takes: PipelineFileReader.expected(range), default: defaultValue.map { $0.grouped } ?? "none", meaning)
    }

    public static func number(
        _ path: String, _ range: ClosedRange<Double>, unit: String? = nil, default defaultValue: Double?, _ meaning: String
    ) -> PipelineKey {
        PipelineKey(
            path, takes: PipelineFileReader.expected(range, unit: unit), default: defaultValue.map(PipelineFileReader.bound) ?? "none", meaning)
    }

    public static func choice<E: CaseIterable & RawRepresentable>(_ path: String, _ type: E.Type, default defaultValue: String, _ meaning: String)
        -> PipelineKey where E.RawValue == String
    {
        PipelineKey(path, takes: PipelineFileReader.expected(type), default: defaultValue, meaning)
    }

    public static func boolean(_ path: String, default defaultValue: Bool, _ meaning: String) -> PipelineKey {
        PipelineKey(path, takes: "true or false", default: "\(defaultValue)", meaning)
    }
}

extension Array where Element == PipelineKey {
    /// The keys written directly in the section at `path` (`""` for the top level).
    public func keys(in path: String) -> [String] {
        let prefix = path.isEmpty ? "" : path + "."
        return compactMap { key in
            guard key.path.hasPrefix(prefix) else { return nil }
            let rest = key.path.dropFirst(prefix.count)
            return rest.contains(".") ? nil : String(rest)
        }
    }
}

/// The keys one component reads, under the name `zonefeed config reference` gives it.
public struct PipelineReference: Sendable {
    public var component: String
    public var keys: [PipelineKey]

    public init(component: String, keys: [PipelineKey]) {
        self.component = component
        self.keys = keys
    }
}

extension PipelineReference {
    /// The references as Markdown, a table per component: what `zonefeed config reference`
    /// prints and docs/pipeline-file.md holds.
    public static func markdown(_ references: [PipelineReference]) -> String {
        // A `<name>` placeholder outside code would be read as an HTML tag.
        func cell(_ text: String) -> String {
            let escaped = text.replacingOccurrences(of: "|", with: "\\|", options: .literal)
            return escaped.contains("<") ? "`\(escaped)`" : escaped
        }
        var lines: [String] = []
        for reference in references {
            if !lines.isEmpty { lines.append("") }
            lines.append("#### \(reference.component)")
            lines.append("")
            lines.append("| Key | Takes | Default | What it does |")
            lines.append("| --- | --- | --- | --- |")
            for key in reference.keys {
                lines.append("| `\(key.path)` | \(cell(key.takes)) | \(cell(key.defaultValue)) | \(cell(key.meaning)) |")
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
