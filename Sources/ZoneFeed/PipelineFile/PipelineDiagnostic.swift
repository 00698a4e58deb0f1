/// One problem in a pipeline file and where it is, printed the way compilers print theirs so
/// that editors and terminals can jump to it:
/// `pipelines/notes.yml:14:9: unknown type 'bigin' for field wordCount (did you mean 'bigint'?)`.
///
/// Lines and columns are 1-based; columns count Unicode scalars, as libyaml's marks do. Line 0
/// means the problem concerns the file as a whole (it could not be read).
public struct PipelineDiagnostic: Sendable, Hashable, CustomStringConvertible {
    public var file: String
    public var line: Int
    public var column: Int
    /// What is wrong, as a sentence. Never holds a secret's value.
    public var message: String

    public init(file: String, line: Int, column: Int, message: String) {
        self.file = file
        self.line = line
        self.column = column
        self.message = message
    }

    public var description: String { "\(file):\(line):\(column): \(message)" }
}

/// A pipeline file that was refused: every problem found in it, not just the first, so that one
/// round of editing can fix them all.
public struct PipelineFileError: Error, Sendable, CustomStringConvertible {
    public var diagnostics: [PipelineDiagnostic]

    public init(diagnostics: [PipelineDiagnostic]) {
        self.diagnostics = diagnostics
    }

    /// The diagnostics in file order, one a line.
    public var description: String {
        diagnostics.enumerated()
            .sorted { ($0.element.line, $0.element.column, $0.offset) < ($1.element.line, $1.element.column, $1.offset) }
            .map(\.element.description)
            .joined(separator: "\n")
    }
}
