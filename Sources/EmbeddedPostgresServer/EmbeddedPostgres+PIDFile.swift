import Foundation

extension EmbeddedPostgres {
    /// `postmaster.pid` (and the socket lock file, which starts the same way). Its lines, from
    /// PostgreSQL's pidfile.h: PID, data folder, start time, port, socket folder, listen address,
    /// shared memory key, status (`starting`, `stopping`, `ready`, `standby`; PostgreSQL 10 and later).
    struct PIDFile {
        var pid: Int32
        var port: Int?
        var socketDirectory: String?
        var status: String?
        /// When the postmaster started, in seconds since 1970 (line 3).
        var startedAt: Int64?

        /// The file is the server account's to write, and zonefeed may read it as root: at most
        /// its first 4 KiB are read (it holds eight short lines), and a PID that names no single
        /// process (0 signals the reader's own process group; `Int32.min` has no magnitude) is
        /// no PID.
        static func read(_ path: String) -> PIDFile? {
            guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
            defer { try? handle.close() }
            guard let data = try? handle.read(upToCount: 4_096), let text = String(data: data, encoding: .utf8) else { return nil }
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map {
                $0.trimmingCharacters(in: .whitespaces)
            }
            // A negative PID marks a standalone backend (postgres --single).
            guard let first = lines.first, let pid = Int32(first), pid != 0, pid != .min else { return nil }
            func line(_ number: Int) -> String? { lines.count >= number ? lines[number - 1] : nil }
            return PIDFile(
                pid: abs(pid),
                port: line(4).flatMap { Int($0) },
                socketDirectory: line(5),
                status: line(8).flatMap { $0.isEmpty ? nil : $0 },
                startedAt: line(3).flatMap { Int64($0) }
            )
        }
    }
}
