import Foundation
import ZoneFeed

/// The metrics file for node_exporter's textfile collector: the run's metrics in Prometheus'
/// text format, written beside the target and renamed over it, so the collector never reads half
/// a file. A run that did not succeed carries the previous file's last-success timestamp over:
/// the file is the only memory a textfile metric has between runs.
struct MetricsFile {
    let path: String

    /// The most of a previous file read for its last success: a textfile of one pipeline's
    /// metrics is a few kilobytes.
    static let maxPreviousBytes = 1 << 20

    func write(_ text: String) throws {
        // A file is renamed over the path: over a FIFO or a device (`--metrics-file /dev/null`,
        // as root) that would replace it, and reading one for the previous success would wait
        // for a writer or read forever.
        var info = stat()
        if stat(path, &info) == 0, info.st_mode & S_IFMT != S_IFREG {
            throw MetricsExportError(
                .fileNotRegular,
                "the metrics file \(path) exists and is not a regular file (a folder, a device or a FIFO): name a file in node_exporter's textfile folder")
        }
        var text = text
        if !text.contains("\n\(ZoneFeedMetric.lastSuccess.name){") && !text.hasPrefix("\(ZoneFeedMetric.lastSuccess.name){"),
            let previous = TextFile.read(atPath: path, maxBytes: Self.maxPreviousBytes)
        {
            text += Self.lines(of: ZoneFeedMetric.lastSuccess.name, in: previous)
        }
        let url = URL(fileURLWithPath: path)
        // A name no one can guess, made by this process alone (O_EXCL) and never through a link
        // (O_NOFOLLOW): the textfile folder may be writable by others, and a link planted at a
        // name made of the pid sent the write, and the mode, to whatever file it pointed at.
        let temporary = url.deletingLastPathComponent().appendingPathComponent(".\(url.lastPathComponent).\(UInt64.random(in: 0...UInt64.max)).tmp").path
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            throw MetricsExportError(.fileNotWritten, "the metrics file \(path) cannot be written: \(String(cString: strerror(errno)))")
        }
        let file = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        do {
            try file.write(contentsOf: Data(text.utf8))
            // Readable by the collector, which may run as another user (the umask may have taken
            // the bits away); the file holds no secret.
            guard fchmod(fd, 0o644) == 0, rename(temporary, path) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        } catch {
            unlink(temporary)
            throw MetricsExportError(.fileNotWritten, "the metrics file \(path) cannot be written: \(error.localizedDescription)")
        }
    }

    /// The HELP, TYPE and sample lines of one metric in a text-format file.
    static func lines(of name: String, in text: String) -> String {
        text.split(separator: "\n").filter { line in
            line == "# HELP \(name)" || line.hasPrefix("# HELP \(name) ") || line.hasPrefix("# TYPE \(name) ") || line.hasPrefix("\(name){")
                || line.hasPrefix("\(name) ")
        }.map { $0 + "\n" }.joined()
    }
}

/// A metrics export that failed: a sentence, without secrets.
public struct MetricsExportError: Error, Sendable, CustomStringConvertible {
    /// A struct rather than an enum, so that a new code breaks no caller's switch.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        public let description: String
        private init(_ description: String) { self.description = description }

        /// `--metrics-file` names a folder, a device or a FIFO.
        public static let fileNotRegular = Code("fileNotRegular")
        /// The metrics file could not be written or renamed into place.
        public static let fileNotWritten = Code("fileNotWritten")
        /// The Pushgateway could not be reached.
        public static let pushgatewayUnreachable = Code("pushgatewayUnreachable")
        /// The Pushgateway answered with a status other than 2xx.
        public static let pushgatewayRefused = Code("pushgatewayRefused")
    }

    public let code: Code
    public let description: String

    init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }
}
