import Foundation
import Logging

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

extension EmbeddedPostgres {
    struct RunningServer {
        var pid: Int32
        var port: Int
        var socketDirectory: String
    }

    /// The server already running on the data folder, if any. Waits for one that is starting up,
    /// and for one that is shutting down to be gone.
    func runningServer(binaries: Binaries, runner: CommandRunner) async throws -> RunningServer? {
        let deadline = Date().addingTimeInterval(60)
        while true {
            guard let pidFile = PIDFile.read(postmasterPIDFile) else { return nil }
            if !isOurPostmaster(pidFile) {
                removeStaleLockFiles(knownStale: pidFile.pid)
                return nil
            }
            // > pg_ctl status: exit status 0 if a server is running, 3 if not, 4 if the data folder
            // > is not accessible.
            let status = try await runner.run(binaries.pgCtl, ["status", "-D", dataDirectory])
            if status.status != 0 { return nil }
            switch pidFile.status {
            case "ready", nil:
                let socketDirectory = pidFile.socketDirectory.flatMap { $0.isEmpty ? nil : $0 } ?? directory
                return RunningServer(pid: pidFile.pid, port: pidFile.port ?? configuration.port, socketDirectory: socketDirectory)
            default:  // "starting", "stopping", "standby"
                if Date() > deadline {
                    throw EmbeddedPostgresError(
                        .startFailed,
                        "the embedded PostgreSQL server on \(dataDirectory) has been '\(pidFile.status ?? "?")' for a minute: "
                            + "wait for it, or stop it with `pg_ctl stop -m fast -D \(dataDirectory)`, then run again",
                        serverLogTail: tail(of: logFile)
                    )
                }
                try await Task.sleep(for: .milliseconds(200))
            }
        }
    }

    /// Whether the process a PID file names is a live postmaster of this very data folder. A PID
    /// file left by a crash can name a PID the system has since given to another process
    /// (containers restart with small PIDs): pg_ctl and postgres then believe a server is running
    /// and refuse to start. On Linux the postmaster's working directory is its data folder (it
    /// chdirs there), which tells them apart.
    func isOurPostmaster(_ file: PIDFile) -> Bool {
        let pid = file.pid
        guard pid > 0 else { return false }
        if kill(pid, 0) != 0 && errno == ESRCH { return false }
        guard FileManager.default.fileExists(atPath: "/proc/self/cwd") else {
            return true  // no /proc (macOS): trust pg_ctl status
        }
        guard let cwd = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/cwd") else {
            // Another user's process: as root, the server account's, whose working directory
            // only CAP_SYS_PTRACE may read, which a container's root lacks. Taken as gone, the
            // live server's PID file and socket were removed under it, and it shut itself down.
            return Self.isProcess(pid, ownedBy: Self.owner(of: dataDirectory), startedAt: file.startedAt)
        }
        return Self.realPath(cwd) == Self.realPath(dataDirectory)
    }

    /// Whether `pid` is a process of `owner` that started when a PID file says the postmaster did
    /// (`startedAt`, seconds since 1970): what /proc tells anyone of another user's process. The
    /// postmaster writes its time after its exec and start-up (seconds later on a loaded
    /// machine), and /proc's is rounded down twice (the boot's time, the ticks): the file's may
    /// be up to 2 s before the process's and 30 s after.
    static func isProcess(_ pid: Int32, ownedBy owner: uid_t?, startedAt: Int64?) -> Bool {
        guard let owner, let startedAt, let began = processStartTime(pid) else { return false }
        var status = stat()
        guard stat("/proc/\(pid)", &status) == 0, status.st_uid == owner else { return false }
        // Compared without subtracting: the file is the server account's, and its number may
        // be anything (Int64.min would trap a subtraction).
        return began - 2 <= startedAt && startedAt <= began + 30
    }

    /// When `pid` started, in seconds since 1970: its start in clock ticks after boot
    /// (/proc/PID/stat, field 22) and the boot's time (`btime` of /proc/stat).
    static func processStartTime(_ pid: Int32) -> Int64? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")"),
            let boot = try? String(contentsOfFile: "/proc/stat", encoding: .utf8)
        else { return nil }
        // The command's name, between the parentheses, may hold spaces: fields are counted after
        // it, from field 3 (the state).
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        let ticks = sysconf(Int32(_SC_CLK_TCK))
        guard fields.count > 19, let started = Int64(fields[19]), ticks > 0,
            let line = boot.split(separator: "\n").first(where: { $0.hasPrefix("btime ") }),
            let btime = Int64(line.dropFirst("btime ".count).trimmingCharacters(in: .whitespaces))
        else { return nil }
        guard (0...latestTime).contains(btime), (0...latestTime).contains(started / Int64(ticks)) else { return nil }
        return btime + started / Int64(ticks)
    }

    static func owner(of path: String) -> uid_t? {
        var status = stat()
        return stat(path, &status) == 0 ? status.st_uid : nil
    }

    func removeStaleLockFiles(knownStale pid: Int32) {
        logger.info("removing the PID file of an embedded PostgreSQL server that is no longer running", metadata: ["pid": "\(pid)"])
        _ = unlink(postmasterPIDFile)
        // The socket's stale lock is removed by the start that follows, in the folder it
        // checked is the server's (`makeSocketDirectory`): the one the PID file names, or the
        // folder of the usual name under /tmp, may be anyone's.
    }

    func startServer(binaries: Binaries, runner: CommandRunner, socketDirectory: String) async throws {
        rotateLogIfLarge()
        removeStaleSocketLock(in: socketDirectory)
        var settings: [(String, String)] = [
            ("listen_addresses", ""),  // no TCP: the Unix socket in the private folder only
            // The list syntax of unix_socket_directories takes a double-quoted element verbatim.
            ("unix_socket_directories", "\"" + socketDirectory.replacingOccurrences(of: "\"", with: "\"\"", options: .literal) + "\""),
        ]
        settings += configuration.extraServerSettings.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
        // pg_ctl hands -o to /bin/sh (`exec postgres <options>`), hence the shell quoting.
        let options = (["-p", "\(configuration.port)"] + settings.flatMap { ["-c", "\($0.0)=\($0.1)"] })
            .map(Self.shellQuote).joined(separator: " ")
        logger.info("starting the embedded PostgreSQL server", metadata: ["log": "\(logFile)"])
        // Marked before pg_ctl starts it: a server that comes up after pg_ctl gave up waiting
        // (a long recovery), or after zonefeed was ended while it waited, is zonefeed's to stop
        // when the last run lets go of it, not left running for a person to find.
        writeMarker("\(Self.startingMarker) \(Int64(Date().timeIntervalSince1970))\n")
        let result = try await runner.run(
            binaries.pgCtl, ["start", "-w", "-t", "120", "-D", dataDirectory, "-l", logFile, "-o", options]
        )
        guard result.status == 0 else {
            if PIDFile.read(postmasterPIDFile).map({ isOurPostmaster($0) }) != true { _ = unlink(markerFile) }
            throw EmbeddedPostgresError(
                .startFailed,
                "the embedded PostgreSQL server in \(dataDirectory) did not start (pg_ctl exit \(result.status)): read "
                    + "the server log below, fix the cause, and run again; pg_ctl said: "
                    + result.output.trimmingCharacters(in: .whitespacesAndNewlines),
                serverLogTail: tail(of: logFile)
            )
        }
        if let pidFile = PIDFile.read(postmasterPIDFile) {
            writeMarker("\(pidFile.pid)\n")
        }
    }

    /// Writes the marker in place, without following a link. Not a temporary file renamed over
    /// it: one left by a kill between the write and the rename (Foundation's `.dat.nosync…`)
    /// is a file the folder's check does not know, and every later start refused the folder.
    /// A marker torn by a power loss names no server, which is then left running, not lost.
    /// Made anew (`O_EXCL`), not truncated: a hard link the server account put there in the
    /// marker's place would have had root truncate and write the file it links to.
    func writeMarker(_ text: String) {
        _ = unlink(markerFile)
        let descriptor = open(markerFile, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0o600)
        guard descriptor >= 0 else { return }
        defer { _ = close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG else { return }
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
    }

    /// Far past any time a PID file or marker holds (seconds since 1970, the year 36812).
    static let latestTime: Int64 = 1 << 40

    /// The marker's text while a start of zonefeed's has not seen its server up, followed by
    /// when that start began (seconds since 1970).
    static let startingMarker = "starting"

    /// Whether `marker` names `postmaster` as zonefeed's: its PID, or a start of zonefeed's that
    /// began at most a minute before the postmaster did and no later than pg_ctl waits (120 s)
    /// and a minute more. A marker left by a start that brought no server up does not make a
    /// server a person started later on the folder zonefeed's to stop.
    func markerNames(_ postmaster: PIDFile, marker: String) -> Bool {
        if Int32(marker) == postmaster.pid { return true }
        let parts = marker.split(separator: " ")
        // Times from files another account may write: any Int64, bounded before the sums below.
        guard parts.count == 2, parts[0] == Self.startingMarker, let began = Int64(parts[1]), (0...Self.latestTime).contains(began),
            let started = postmaster.startedAt, isOurPostmaster(postmaster)
        else { return false }
        return started >= began - 60 && started <= began + 180
    }

    /// The socket's lock file holds the postmaster's PID too, and postgres refuses it the same way.
    /// `socketDirectory` must be one `makeSocketDirectory` gave: the cluster's folder, or one
    /// under /tmp private to the server's account.
    func removeStaleSocketLock(in socketDirectory: String) {
        let socketLock = "\(socketDirectory)/.s.PGSQL.\(configuration.port).lock"
        if let lock = PIDFile.read(socketLock), !isOurPostmaster(lock) {
            _ = unlink(socketLock)
            _ = unlink("\(socketDirectory)/.s.PGSQL.\(configuration.port)")
        }
    }

    func stopServer(mode: ShutdownMode, binaries: Binaries, runner: CommandRunner) async throws {
        logger.info("stopping the embedded PostgreSQL server", metadata: ["mode": "\(mode.rawValue)"])
        let result = try await runner.run(binaries.pgCtl, ["stop", "-D", dataDirectory, "-m", mode.rawValue, "-w", "-t", "60"])
        _ = unlink(markerFile)
        guard result.status == 0 else {
            throw EmbeddedPostgresError(
                .stopFailed,
                "pg_ctl could not stop the embedded PostgreSQL server (exit \(result.status)): stop it with "
                    + "`pg_ctl stop -m fast -D \(dataDirectory)`; pg_ctl said: "
                    + result.output.trimmingCharacters(in: .whitespacesAndNewlines),
                serverLogTail: tail(of: logFile)
            )
        }
    }
}
