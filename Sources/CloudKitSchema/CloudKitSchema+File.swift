import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

extension CloudKitSchema {
    /// The largest schema file read: 16 MiB. An export of an app's schema is a few kilobytes to
    /// a few hundred; past this the path names something else (a device, a FIFO, a database
    /// dump), and reading stops there rather than fill the memory.
    public static let maxFileBytes = 16 << 20

    /// Reads and parses a `.ckdb` file; the error names the file, and the line and column when
    /// the text does not parse.
    public init(contentsOfFile path: String) throws(SchemaFileError) {
        let data = try Self.readBounded(path)
        guard let text = String(data: data, encoding: .utf8) else {
            throw SchemaFileError(path: path, reason: "it is not UTF-8 text (a .ckdb file is)")
        }
        do {
            self = try CloudKitSchema(parsing: text)
        } catch {
            throw SchemaFileError(path: path, syntax: error)
        }
    }

    /// At most `maxFileBytes`: reading stops at one byte more, whatever the path names, as the
    /// pipeline file's reader does (this module reads alone, so it has its own few lines).
    /// A FIFO that nothing writes to within 10 s is refused, as the pipeline file's reader
    /// refuses one: opened without O_NONBLOCK, it held the command in `open` for ever.
    static func readBounded(_ path: String) throws(SchemaFileError) -> Data {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else {
            var isFolder: ObjCBool = false
            let reason =
                !FileManager.default.fileExists(atPath: path, isDirectory: &isFolder)
                ? "there is no such file" : "it cannot be read (check its permissions)"
            throw SchemaFileError(path: path, reason: reason)
        }
        defer { close(fd) }
        var info = stat()
        if fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFIFO {
            var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            var polled: Int32
            repeat { polled = poll(&ready, 1, 10_000) } while polled < 0 && errno == EINTR
            if polled <= 0 {
                throw SchemaFileError(
                    path: path, reason: "it is a FIFO that nothing wrote to within 10 s: name the .ckdb file itself, or write to the FIFO as zonefeed starts")
            }
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while data.count <= maxFileBytes {
            let wanted = min(buffer.count, maxFileBytes + 1 - data.count)
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, wanted) }
            if count < 0 {
                if errno == EINTR { continue }
                let reason = errno == EISDIR ? "it is a folder" : "it cannot be read (\(String(cString: strerror(errno))))"
                throw SchemaFileError(path: path, reason: reason)
            }
            if count == 0 { break }
            data.append(contentsOf: buffer[0..<count])
        }
        guard data.count <= maxFileBytes else {
            throw SchemaFileError(
                path: path, reason: "it is larger than \(maxFileBytes >> 20) MiB, the most a schema file may be: check that this is the .ckdb file")
        }
        return data
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
