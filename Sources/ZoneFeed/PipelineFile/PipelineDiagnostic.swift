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

    /// The longest message printed: values in it are quoted short already (`InertText.quoted`),
    /// but a name used as a key (a record type's, a field's) is part of a path and could be long.
    public static let maxMessageLength = 400

    /// One line, whatever the file held: control characters escaped, the message capped.
    public var description: String {
        "\(InertText.escaped(file)):\(line):\(column): \(InertText.escaped(InertText.capped(message, limit: Self.maxMessageLength)))"
    }
}

/// A pipeline file that was refused: every problem found in it, not just the first, so that one
/// round of editing can fix them all.
public struct PipelineFileError: Error, Sendable, CustomStringConvertible {
    public var diagnostics: [PipelineDiagnostic]

    public init(diagnostics: [PipelineDiagnostic]) {
        self.diagnostics = diagnostics
    }

    /// How many problems are listed; the rest are counted. A file of two million unknown keys
    /// is one mistake (a wrong file, a generator gone astray), and listing them all would take
    /// hundreds of megabytes and minutes of a terminal.
    public static let maxListed = 50

    /// The diagnostics in file order, one a line, the first `maxListed` of them.
    public var description: String {
        let sorted = Self.sorted(diagnostics)
        var lines = sorted.prefix(Self.maxListed).map(\.description)
        if sorted.count > Self.maxListed {
            let more = sorted.count - Self.maxListed
            lines.append("… and \(more.grouped) more problem\(more == 1 ? "" : "s")")
        }
        return lines.joined(separator: "\n")
    }

    /// File by file (in the order the files were first named: the pipeline file, then a
    /// schema file it names), each file's in line order.
    static func sorted(_ diagnostics: [PipelineDiagnostic]) -> [PipelineDiagnostic] {
        var fileOrder: [String: Int] = [:]
        for diagnostic in diagnostics where fileOrder[diagnostic.file] == nil { fileOrder[diagnostic.file] = fileOrder.count }
        return diagnostics.enumerated()
            .sorted {
                (fileOrder[$0.element.file]!, $0.element.line, $0.element.column, $0.offset)
                    < (fileOrder[$1.element.file]!, $1.element.line, $1.element.column, $1.offset)
            }
            .map(\.element)
    }
}
