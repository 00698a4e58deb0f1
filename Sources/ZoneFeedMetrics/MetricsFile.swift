import Foundation

/// The metrics file for node_exporter's textfile collector: the run's metrics in Prometheus'
/// text format, written beside the target and renamed over it, so the collector never reads half
/// a file. A run that did not succeed carries the previous file's last-success timestamp over:
/// the file is the only memory a textfile metric has between runs.
struct MetricsFile {
    let path: String

    func write(_ text: String) throws {
        var text = text
        if !text.contains("\n\(ZoneFeedMetric.lastSuccess.name){") && !text.hasPrefix("\(ZoneFeedMetric.lastSuccess.name){"),
            let previous = try? String(contentsOfFile: path, encoding: .utf8)
        {
            text += Self.lines(of: ZoneFeedMetric.lastSuccess.name, in: previous)
        }
        let url = URL(fileURLWithPath: path)
        let temporary = url.deletingLastPathComponent().appendingPathComponent(".\(url.lastPathComponent).\(getpid()).tmp")
        do {
            try Data(text.utf8).write(to: temporary)
            // Readable by the collector, which may run as another user; the file holds no secret.
            try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: temporary.path)
            guard rename(temporary.path, path) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        } catch {
            try? FileManager.default.removeItem(at: temporary)
            throw MetricsExportError("the metrics file \(path) cannot be written: \(error.localizedDescription)")
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
    public let description: String
    init(_ description: String) { self.description = description }
}
