import ArgumentParser
import CloudKitSchema
import Foundation
import ZoneFeed
import ZoneFeedPostgres

/// `zonefeed schema …`: what a CloudKit schema file (`.ckdb`) yields.
struct SchemaCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "schema",
        abstract: "Read a CloudKit schema file (.ckdb, as cktool export-schema writes it).",
        subcommands: [MappingCommand.self])

    struct MappingCommand: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "mapping",
            abstract: "Print the explicit recordTypes: section a CloudKit schema file yields, to paste into a pipeline file.",
            discussion: """
                The same tables, columns and types as `recordTypes: { schemaFile: FILE }` with the \
                same options. A file that does not parse is refused as FILE:LINE:COLUMN: message, \
                exit 2.
                """)

        @Argument(help: "The .ckdb file.")
        var schemaFile: String

        @Flag(help: "Strip Core Data's CD_ prefix from record types and fields (CD_title becomes title).")
        var stripCoreDataPrefix = false

        @Flag(help: "Index the columns of QUERYABLE and SORTABLE fields (index: true).")
        var indexQueryable = false

        @Option(name: .customLong("skip"), help: "A record type to leave out (repeatable).")
        var skip: [String] = []

        func run() throws {
            let schema: CloudKitSchema
            do {
                schema = try CloudKitSchema(contentsOfFile: schemaFile)
            } catch {
                // As a pipeline file's problems are printed: one line, escaped, a long token cut.
                let line =
                    error.syntax.map {
                        PipelineDiagnostic(file: error.path, line: $0.position.line, column: $0.position.column, message: $0.message).description
                    } ?? InertText.escaped(error.description)
                FileHandle.standardError.write(Data("\(line)\n".utf8))
                throw Exit.usage
            }
            for name in skip where schema[recordType: name] == nil {
                let suggestion = NameSuggestion.closest(to: name, among: schema.recordTypes.map(\.name)).map { " (did you mean \($0)?)" } ?? ""
                let sentence = "--skip \(name): \(schemaFile) defines no record type \(name)\(suggestion)"
                FileHandle.standardError.write(Data("\(InertText.escaped(sentence))\n".utf8))
                throw Exit.usage
            }
            let options = SchemaFileMapping(stripCoreDataPrefix: stripCoreDataPrefix, indexes: indexQueryable ? .queryable : .none, skip: Set(skip))
            let header = [
                "The recordTypes a CloudKit schema file yields: zonefeed schema mapping \(schemaFile)",
                "(the same as recordTypes: { schemaFile: \(schemaFile) }; every field has a typed column, the system fields are the system columns)",
            ]
            print(RecordTypesYAML.text(options.mappings(from: schema), header: header), terminator: "")
        }
    }
}
