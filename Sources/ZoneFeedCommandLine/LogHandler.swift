import CloudKitModel
import Foundation
import Logging
import ZoneFeed

/// Logs to stderr: readable text, or one JSON object a line (`--log-format json`).
struct ZoneFeedLogHandler: LogHandler {
    enum Format: String, CaseIterable, Sendable { case text, json }

    let label: String
    let format: Format
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var all = metadata
        if let extra = event.metadata { all.merge(extra) { _, new in new } }
        let time = Date().formatted(.iso8601)
        var line: String
        switch format {
        case .text:
            // One event, one line: the message and every value may hold text from a server or
            // a file (a reason, a zone name), whose newline would forge the next log line and
            // whose escape sequences would drive the terminal.
            line = "\(time) \(event.level) \(InertText.escaped(event.message.description))"
            for key in all.keys.sorted() { line += " \(InertText.escaped(key))=\(InertText.escaped(all[key]!.description))" }
        case .json:
            var object: [String: JSONValue] = ["time": .string(time), "level": .string("\(event.level)"), "message": .string("\(event.message)")]
            for (key, value) in all { object[key] = .string("\(value)") }
            line = JSONValue.object(object).jsonText
        }
        Terminal.shared.writeLine(line)
    }
}
