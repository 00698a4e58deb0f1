import Foundation

extension CloudKitSchema {
    /// Reads and parses a `.ckdb` file; the error names the file, and the line and column when
    /// the text does not parse.
    public init(contentsOfFile path: String) throws(SchemaFileError) {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            var isFolder: ObjCBool = false
            let reason =
                !FileManager.default.fileExists(atPath: path, isDirectory: &isFolder)
                ? "there is no such file"
                : isFolder.boolValue ? "it is a folder" : "it cannot be read (check its permissions)"
            throw SchemaFileError(path: path, reason: reason)
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw SchemaFileError(path: path, reason: "it is not UTF-8 text (a .ckdb file is)")
        }
        do {
            self = try CloudKitSchema(parsing: text)
        } catch {
            throw SchemaFileError(path: path, syntax: error)
        }
    }
}

/// A schema file that could not be read, or that does not parse (`syntax` says where).
public struct SchemaFileError: Error, Sendable, CustomStringConvertible {
    public var path: String
    public var reason: String
    public var syntax: SchemaSyntaxError?

    public init(path: String, reason: String) {
        self.path = path
        self.reason = reason
    }

    public init(path: String, syntax: SchemaSyntaxError) {
        self.path = path
        self.reason = syntax.message
        self.syntax = syntax
    }

    /// `schema.ckdb:3:15: field title has unknown type …`, or `schema.ckdb: cannot read it: …`.
    public var description: String {
        syntax.map { "\(path):\($0.position.line):\($0.position.column): \($0.message)" } ?? "\(path): cannot read the schema file: \(reason)"
    }
}
