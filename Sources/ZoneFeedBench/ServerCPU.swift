import Foundation
import LibPQ
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// What a PostgreSQL server on this machine spent of its CPU, and how much of the machine sat
/// idle, between two samples: beside a phase's rows, it shows how much of a ratio to the ceiling
/// is the server's own work per row and how much is CPU the server did not get (zonefeed's, or
/// cores left idle). Read from /proc: the postmaster's own time and its reaped children's
/// (`cutime`, `cstime`: every session's backend once it has ended), and the time of its
/// children still alive (the checkpointer, the WAL writer, sessions still open), so a backend
/// is counted once whether it ended before the second sample or not.
///
/// Only for a server reached over a Unix socket, whose postmaster the kernel names
/// (`Connection.peerProcessID`); nil for one over TCP, which may be another machine's, and
/// off Linux.
struct ServerCPU: Sendable {
    let postmaster: Int32
    /// When the postmaster started (clock ticks after boot): a pid the kernel gave to another
    /// process since is not read as the server.
    let startedAt: Int

    /// Cumulative figures, in clock ticks.
    struct Sample: Sendable {
        var server: Int
        var machine: Int
        var idle: Int
    }

    /// What a phase cost the server, and the share of the machine left idle meanwhile.
    struct Use: Sendable {
        var serverSeconds: Double
        var idleShare: Double

        func microsecondsPerRow(_ rows: Int) -> Double { serverSeconds * 1_000_000 / Double(max(rows, 1)) }

        /// "PostgreSQL 11.4 µs a row, 7% of the machine idle".
        func text(rows: Int) -> String {
            String(format: "PostgreSQL %.1f µs a row, %.0f%% of the machine idle", microsecondsPerRow(rows), idleShare * 100)
        }
    }

    /// Where a bench keeps the server it found, shared by its copies.
    final class Slot: Sendable {
        private let found = Mutex<ServerCPU?>(nil)
        var value: ServerCPU? {
            get { found.withLock { $0 } }
            set { found.withLock { $0 = newValue } }
        }
    }

    /// The server of `conninfo`, when it runs on this machine and its figures can be read.
    /// Connects: call it off Swift's cooperative threads.
    static func find(conninfo: String) -> ServerCPU? {
        #if os(Linux)
            guard let postmaster = try? Connection.withConnection(conninfo, { $0.peerProcessID }),
                read("/proc/\(postmaster)/comm")?.hasPrefix("postgres") == true,
                let times = read("/proc/\(postmaster)/stat").flatMap(Self.times)
            else { return nil }
            let server = ServerCPU(postmaster: postmaster, startedAt: times.startedAt)
            return server.sample() == nil ? nil : server
        #else
            return nil
        #endif
    }

    /// nil when the postmaster is gone (or its pid is another process's now), or when /proc
    /// cannot be read.
    ///
    /// A session ending while the children are read would be missed (gone from /proc, not yet
    /// in the postmaster's reaped time) or counted twice, the other way round: the reaped time is
    /// read before and after the children, which are read again while it moves (as it does
    /// when the sample follows a run whose sessions are ending). On a server whose sessions
    /// end all the time (one that many tests share) the try that moved least is taken after
    /// `tries`: its error is at most what was reaped during it. A child the kernel is releasing
    /// (state X) has been added to the reaped time already and is left out.
    func sample() -> Sample? {
        var closest: (sample: Sample, moved: Int)?
        for _ in 0..<Self.tries {
            guard let (machine, idle) = Self.machineTicks(), let first = ownTimes() else { return nil }
            var children = 0
            for child in childProcesses() {
                guard let times = Self.read("/proc/\(child)/stat").flatMap(Self.times), times.parent == postmaster, times.state != "X"
                else { continue }
                // A child's own children it has waited for (a program it ran) are its time too,
                // as they are once it is reaped.
                children += times.own + times.reapedChildren
            }
            guard let last = ownTimes() else { return nil }
            let sample = Sample(server: last.own + last.reapedChildren + children, machine: machine, idle: idle)
            let moved = last.reapedChildren - first.reapedChildren
            if moved == 0 { return sample }
            if moved < closest?.moved ?? .max { closest = (sample, moved) }
            usleep(Self.pause)
        }
        return closest?.sample
    }

    /// Up to a second of tries, two milliseconds apart: the sessions of a run that has just
    /// ended are reaped within a few.
    static let tries = 50
    static let pause: useconds_t = 2_000

    /// The postmaster's own line, if the pid is still the postmaster's.
    private func ownTimes() -> (state: Character, parent: Int32, own: Int, reapedChildren: Int, startedAt: Int)? {
        guard let times = Self.read("/proc/\(postmaster)/stat").flatMap(Self.times), times.startedAt == startedAt else { return nil }
        return times
    }

    /// The postmaster's children: its thread's list when the kernel keeps one (the postmaster
    /// has a single thread), else every process, each then checked for its parent.
    /// > proc(5), /proc/pid/task/tid/children: "A space-separated list of child tasks of this
    /// > task."
    private func childProcesses() -> [Substring] {
        if let list = Self.read("/proc/\(postmaster)/task/\(postmaster)/children") {
            return list.split(whereSeparator: { $0 == " " || $0 == "\n" })
        }
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.filter { $0.first?.isNumber == true }.map { Substring($0) }
    }

    /// From `before` to now; nil when either sample is missing, or when a figure went back (the
    /// server was started again in between).
    func use(since before: Sample?) -> Use? {
        guard let before, let after = sample(), after.server >= before.server, after.machine > before.machine,
            after.idle >= before.idle
        else { return nil }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        return Use(
            serverSeconds: Double(after.server - before.server) / ticks,
            idleShare: Double(after.idle - before.idle) / Double(after.machine - before.machine))
    }

    /// A process's state, parent and times from its `/proc/<pid>/stat` line, in clock ticks:
    /// `utime + stime`, `cutime + cstime` (the children it has waited for), and when it started.
    /// The command between parentheses may hold spaces and parentheses of its own, so the
    /// fields are counted from the last `)`.
    /// > proc(5): "(3) state … (4) ppid … (14) utime … (15) stime … (16) cutime … (17) cstime …
    /// > (22) starttime"
    static func times(ofStatLine line: String) -> (state: Character, parent: Int32, own: Int, reapedChildren: Int, startedAt: Int)? {
        guard let close = line.lastIndex(of: ")") else { return nil }
        // Field 3, the state, comes first after the parenthesis.
        let fields = line[line.index(after: close)...].split(separator: " ", omittingEmptySubsequences: true)
        guard fields.count >= 20, fields[0].count == 1, let state = fields[0].first, let parent = Int32(fields[1]), let utime = Int(fields[11]),
            let stime = Int(fields[12]), let cutime = Int(fields[13]), let cstime = Int(fields[14]), let startedAt = Int(fields[19]),
            [utime, stime, cutime, cstime, startedAt].allSatisfy({ $0 >= 0 })
        else { return nil }
        let (own, ownOverflow) = utime.addingReportingOverflow(stime)
        let (children, childrenOverflow) = cutime.addingReportingOverflow(cstime)
        guard !ownOverflow, !childrenOverflow, own < Int.max / 4, children < Int.max / 4 else { return nil }
        return (state, parent, own, children, startedAt)
    }

    /// The machine's ticks since boot, all and idle, from the first line of /proc/stat.
    /// > proc(5), /proc/stat: "cpu … user nice system idle iowait irq softirq steal guest
    /// > guest_nice"; guest time is counted in user time already, so it is left out.
    static func machineTicks(ofStatLine line: Substring) -> (all: Int, idle: Int)? {
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        guard fields.first == "cpu", fields.count >= 9 else { return nil }
        let values = fields[1...8].compactMap { Int($0) }
        guard values.count == 8, values.allSatisfy({ $0 >= 0 }), values.allSatisfy({ $0 < Int.max / 16 }) else { return nil }
        return (values.reduce(0, +), values[3] + values[4])
    }

    private static func machineTicks() -> (all: Int, idle: Int)? {
        read("/proc/stat").flatMap { $0.split(separator: "\n", maxSplits: 1).first }.flatMap(machineTicks(ofStatLine:))
    }

    /// A file of /proc as text; a command's name need not be UTF-8, so bytes that are not are
    /// replaced rather than the file refused.
    private static func read(_ path: String) -> String? {
        FileManager.default.contents(atPath: path).map { String(decoding: $0, as: UTF8.self) }
    }
}
