import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A private PostgreSQL cluster in a folder of its own: what `destination.url: embedded` means, and
/// what the test support starts when no database is configured.
///
/// Layout of `configuration.directory` (by default `.zonefeed/postgres`):
///
/// ```
/// data/                      the cluster (initdb), kept between runs
/// .s.PGSQL.<port>            the Unix socket: the server listens on no TCP address at all
/// server.log                 the server's log (pg_ctl -l), rotated once past 10 MB
/// init.lock                  flock held while a process initializes, starts or stops the server
/// users.lock                 a shared flock held by every process that uses the server (see stop)
/// started-by-zonefeed.pid    the postmaster PID, when zonefeed (not a person) started the server
/// ```
///
/// PostgreSQL refuses to run as root, so when this process is root the server binaries run as an
/// unprivileged account through `runuser -u <account> --`: the owner of an existing cluster, else
/// `postgres`, else `nobody`.
///
/// Why a flock and not a PID file for "who uses the server": several zonefeed processes may use
/// one embedded cluster at once (overlapping cron runs). The kernel drops a flock when its process
/// dies, however it dies, so the count of users can never be left wrong by a crash.
public struct EmbeddedPostgres: Sendable {
    public struct Configuration: Sendable {
        /// The cluster's folder. A relative path is taken from the current directory.
        public var directory: String
        /// The database that `start()` creates when it is missing.
        public var database: String
        /// The superuser initdb creates (trust authentication on the private socket).
        public var user: String
        /// The port only names the socket file (`.s.PGSQL.<port>`); the folder is private, so the
        /// usual 5432 never collides with another server.
        public var port: Int
        /// Extra `-c name=value` server settings for each start, e.g. `fsync=off` for tests.
        public var extraServerSettings: [String: String]

        public init(
            directory: String = ".zonefeed/postgres",
            database: String = "zonefeed",
            user: String = "zonefeed",
            port: Int = 5432,
            extraServerSettings: [String: String] = [:]
        ) {
            self.directory = EmbeddedPostgres.absolutePath(directory)
            self.database = database
            self.user = user
            self.port = port
            self.extraServerSettings = extraServerSettings
        }
    }

    /// A running server and this process's share in it. Pass it back to `stop(_:)`.
    public struct Handle: Sendable {
        /// A libpq conninfo string: `host=<socket folder> port=<port> user=<user> dbname=<database>`.
        public let connectionString: String
        /// True when this call started the server; false when it reused one already running.
        public let startedByUs: Bool
        /// The folder that holds the Unix socket (the `host` of `connectionString`).
        public let socketDirectory: String
        public let port: Int
        let lease: Lease
    }

    /// How `stop` shuts the server down; these are `pg_ctl stop -m` modes.
    public enum ShutdownMode: String, Sendable {
        /// Waits for every client to disconnect; refuses new connections meanwhile.
        case smart
        /// Rolls back open transactions, disconnects clients, then shuts down cleanly.
        case fast
        /// Stops at once, with crash recovery on the next start. For throwaway test clusters.
        case immediate
    }

    public let configuration: Configuration
    let logger: Logger

    /// The folder the configuration asked for; `configuration.directory` is where the cluster
    /// lives, elsewhere when the server's account cannot reach the folder asked for.
    public let requestedDirectory: String

    public init(_ configuration: Configuration, logger: Logger = Logger(label: "zonefeed.postgres.embedded")) {
        var configuration = configuration
        configuration.directory = EmbeddedPostgres.absolutePath(configuration.directory)
        requestedDirectory = configuration.directory
        // As root, the server runs as another account, which cannot pass a folder such as /root
        // (mode 0700): where root clones a project and runs the demo. The cluster then lives in
        // a folder of its own under /var/lib/zonefeed, named after the folder asked for, so that
        // every command run from there finds the same one.
        if geteuid() == 0, let account = Self.defaultServerAccount,
            Self.firstUnreachableAncestor(of: configuration.directory, for: account, missingIsReachable: true) != nil
        {
            configuration.directory = Self.relocatedDirectory(for: configuration.directory)
        }
        self.configuration = configuration
        var logger = logger
        logger[metadataKey: "postgres.directory"] = "\(configuration.directory)"
        self.logger = logger
    }

    /// Where the cluster for `directory` lives when the server's account cannot reach it: short
    /// enough for the Unix socket's path, and the same for the same folder.
    static func relocatedDirectory(for directory: String) -> String {
        // FNV-1a: a stable name, not a secret.
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in directory.utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
        }
        return "/var/lib/zonefeed/postgres-" + String(hash, radix: 16)
    }

    static var defaultServerAccount: Account? { Account(name: "postgres") ?? Account(name: "nobody") }

    // MARK: - Paths

    var directory: String { configuration.directory }
    var dataDirectory: String { directory + "/data" }
    var initdbDirectory: String { directory + "/data.initdb" }
    var logFile: String { directory + "/server.log" }
    var initLockFile: String { directory + "/init.lock" }
    var usersLockFile: String { directory + "/users.lock" }
    var markerFile: String { directory + "/started-by-zonefeed.pid" }
    var postmasterPIDFile: String { dataDirectory + "/postmaster.pid" }

    // MARK: - Start

    /// Runs initdb when the data folder is missing, starts the server unless one is already running
    /// on that folder, creates the database when it is missing, and returns a handle with the
    /// conninfo. Safe to call from several processes at once: one initializes and starts, the
    /// others wait for it and reuse the server.
    public func start() throws -> Handle {
        try checkPaths()
        try createDirectory()
        if requestedDirectory != directory {
            logger.notice(
                "the embedded PostgreSQL server runs as another account, which cannot reach \(requestedDirectory); its cluster lives in \(directory)")
        }

        let initLock = try FileLock(path: initLockFile, mode: .exclusive)
        defer { initLock.release() }

        let account = try serverAccount()
        if let account { try prepareDirectory(for: account) }

        let preferredMajor = try existingClusterMajorVersion()
        let binaries = try Binaries.locate(preferredMajorVersion: preferredMajor, logger: logger)
        let runner = CommandRunner(account: account, workingDirectory: directory, logger: logger)

        if preferredMajor == nil {
            try initializeCluster(binaries: binaries, runner: runner)
        } else if let preferredMajor, let binariesMajor = try binaries.majorVersion(runner: runner),
                  binariesMajor != preferredMajor {
            throw EmbeddedPostgresError(
                .versionMismatch,
                "the embedded cluster in \(dataDirectory) was created by PostgreSQL \(preferredMajor), but the "
                    + "server binaries in \(binaries.directory) are PostgreSQL \(binariesMajor): install PostgreSQL "
                    + "\(preferredMajor) or point ZONEFEED_PG_BINDIR at its bin folder, or move the folder away to start afresh"
            )
        }

        let socketDirectory: String
        let port: Int
        let startedByUs: Bool
        if let running = try runningServer(binaries: binaries, runner: runner) {
            socketDirectory = running.socketDirectory
            port = running.port
            startedByUs = false
            logger.info("reusing the embedded PostgreSQL server already running", metadata: ["pid": "\(running.pid)"])
        } else {
            try startServer(binaries: binaries, runner: runner)
            socketDirectory = directory
            port = configuration.port
            startedByUs = true
        }

        let connectionString = Self.conninfo([
            ("host", socketDirectory), ("port", "\(port)"), ("user", configuration.user), ("dbname", configuration.database),
        ])
        do {
            try createDatabaseIfMissing(binaries: binaries, socketDirectory: socketDirectory, port: port)
            let lease = try Lease(path: usersLockFile)
            return Handle(
                connectionString: connectionString, startedByUs: startedByUs,
                socketDirectory: socketDirectory, port: port, lease: lease
            )
        } catch {
            // Nobody else can be using a server we have just started (we hold init.lock), so do not
            // leave it running behind an error.
            if startedByUs { try? stopServer(mode: .fast, binaries: binaries, runner: runner) }
            throw error
        }
    }

    // MARK: - Stop

    /// Lets go of this process's share in the server, and stops the server when this was the last
    /// zonefeed process using it and zonefeed started it.
    ///
    /// The choice, against "stop it if this process started it": with overlapping runs the process
    /// that started the server is not always the last to finish, and stopping under another run
    /// (even with `-m smart`, which refuses that run's next connection) would break it. So every
    /// handle holds a shared flock on `users.lock`, and `stop` shuts down only when it can take that
    /// lock exclusively. A server started by hand (`pg_ctl start`) is never stopped.
    ///
    /// The default mode is `fast`, not `smart`: when no zonefeed process is left, the only sessions
    /// still open are ad-hoc ones (a `psql` left open), and `smart` would leave a half-stopped server
    /// that refuses the next run's connections for as long as such a session stays open.
    public func stop(_ handle: Handle) {
        stop(handle, mode: .fast)
    }

    public func stop(_ handle: Handle, mode: ShutdownMode) {
        guard let leaseDescriptor = handle.lease.take() else { return }  // already stopped
        defer { _ = close(leaseDescriptor) }
        do {
            let initLock = try FileLock(path: initLockFile, mode: .exclusive)
            defer { initLock.release() }
            // > Converting a lock (shared to exclusive) is not guaranteed to be atomic: the existing
            // > lock is first removed, and then a new lock is established. (flock(2))
            // Harmless here: we give the lock up either way, and init.lock keeps starters out.
            if flockRetryingOnInterrupt(leaseDescriptor, LOCK_EX | LOCK_NB) != 0 {
                logger.debug("other processes still use the embedded PostgreSQL server; leaving it running")
                return
            }
            guard let postmaster = PIDFile.read(postmasterPIDFile),
                  let marker = try? String(contentsOfFile: markerFile, encoding: .utf8),
                  Int32(marker.trimmingCharacters(in: .whitespacesAndNewlines)) == postmaster.pid
            else {
                logger.debug("the embedded PostgreSQL server was not started by zonefeed, or is not running; leaving it")
                return
            }
            let account = try serverAccount()
            let binaries = try Binaries.locate(
                preferredMajorVersion: try existingClusterMajorVersion(), logger: logger
            )
            let runner = CommandRunner(account: account, workingDirectory: directory, logger: logger)
            try stopServer(mode: mode, binaries: binaries, runner: runner)
        } catch {
            logger.warning("could not stop the embedded PostgreSQL server", metadata: ["error": "\(error)"])
        }
    }

    /// For throwaway clusters (tests): starts a small watcher process that waits for this process
    /// to end (normally, by a crash, or by SIGKILL, when atexit handlers never run), then stops the
    /// server at once (SIGQUIT is PostgreSQL's immediate shutdown) and deletes the whole directory.
    /// After a clean exit that already deleted the directory, the watcher does nothing.
    public func deleteWhenThisProcessEnds(_ handle: Handle) throws {
        let script = """
            alive() { kill -0 "$1" 2>/dev/null && ! grep -qs '^State:.*zombie' "/proc/$1/status"; }
            while alive "$1"; do sleep 1; done
            [ -d "$2" ] || exit 0
            pid=$(head -n 1 "$2/data/postmaster.pid" 2>/dev/null) || pid=
            if [ -n "$pid" ] && { [ ! -r "/proc/$pid/comm" ] || grep -q postgres "/proc/$pid/comm"; }; then
                kill -QUIT "$pid" 2>/dev/null
                i=0; while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
            fi
            rm -rf "$2"
            """
        let devNull = open("/dev/null", O_RDWR | O_CLOEXEC)
        defer { _ = close(devNull) }
        // Its own process group: a Ctrl-C that ends this process must leave the watcher to clean up.
        // Nobody waits for it; once this process is gone it is reparented and reaped by init.
        _ = try spawn(
            "/bin/sh", ["-c", script, "zonefeed-embedded-postgres-watcher", "\(getpid())", directory],
            environment: childEnvironment(), workingDirectory: "/",
            stdin: devNull, stdout: devNull, stderr: devNull, newProcessGroup: true
        )
    }

    // MARK: - Steps

    private func checkPaths() throws {
        // pg_ctl pastes the data and log paths between double quotes into a /bin/sh command line.
        let forbidden: Set<Character> = ["\"", "$", "`", "\\", "\n", "\r", "\0"]
        if directory.contains(where: { forbidden.contains($0) }) {
            throw EmbeddedPostgresError(
                .badDirectory,
                "the embedded PostgreSQL folder \(directory) contains a character that pg_ctl cannot pass to the shell "
                    + "(\", $, `, \\ or a line break): choose another folder"
            )
        }
        guard (1...65535).contains(configuration.port) else {
            throw EmbeddedPostgresError(.badDirectory, "port \(configuration.port) is not a TCP port number (1 to 65535)")
        }
        // sockaddr_un.sun_path is 108 bytes on Linux and 104 on macOS; PostgreSQL fails to start
        // past it, with a message that does not say which folder to shorten.
        let socketPath = "\(directory)/.s.PGSQL.\(configuration.port)"
        if socketPath.utf8.count >= 100 {
            throw EmbeddedPostgresError(
                .socketPathTooLong,
                "the embedded PostgreSQL socket path \(socketPath) is \(socketPath.utf8.count) bytes, and Unix sockets "
                    + "allow fewer than 100: choose a shorter folder (for example /tmp/zonefeed-pg)"
            )
        }
    }

    private func createDirectory() throws {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            // The socket accepts anyone who can reach it (trust authentication): the folder is the gate.
            _ = chmod(directory, 0o700)
        } catch {
            throw EmbeddedPostgresError(
                .badDirectory,
                "could not create the embedded PostgreSQL folder \(directory) (\(error.localizedDescription)): "
                    + "choose a folder this user can write"
            )
        }
    }

    /// The account the server runs as: nil when this process is not root.
    private func serverAccount() throws -> Account? {
        guard geteuid() == 0 else { return nil }
        var info = stat()
        if stat(dataDirectory, &info) == 0, info.st_uid != 0, let owner = Account(uid: info.st_uid) {
            return owner  // an existing cluster belongs to its owner
        }
        if let account = Self.defaultServerAccount { return account }
        throw EmbeddedPostgresError(
            .noUnprivilegedAccount,
            "PostgreSQL refuses to run as root, and neither a 'postgres' nor a 'nobody' account exists to run it: "
                + "create one (useradd --system postgres) or run zonefeed as a regular user"
        )
    }

    /// As root: hand the folder to the server's account and check that the account can reach it.
    private func prepareDirectory(for account: Account) throws {
        for path in [directory, logFile, logFile + ".1"] where FileManager.default.fileExists(atPath: path) {
            _ = lchown(path, account.uid, account.gid)
        }
        var info = stat()
        if stat(dataDirectory, &info) == 0, info.st_uid != account.uid {
            try chownRecursively(dataDirectory, to: account)
        }
        let runner = CommandRunner(account: account, workingDirectory: "/", logger: logger)
        let probe = try runner.run("/bin/sh", ["-c", "test -w \"$1\" && test -x \"$1\"", "sh", directory])
        if probe.status != 0 {
            let blocker = Self.firstUnreachableAncestor(of: directory, for: account).map { " (\($0) does not let it through)" } ?? ""
            throw EmbeddedPostgresError(
                .directoryUnreachable,
                "PostgreSQL refuses to run as root, so the embedded server runs as '\(account.name)', and that account "
                    + "cannot reach \(directory)\(blocker): choose a directory that account can reach (for example under "
                    + "/srv or /tmp), or run zonefeed as a regular user"
            )
        }
    }

    private func chownRecursively(_ root: String, to account: Account) throws {
        logger.info("handing the embedded PostgreSQL cluster to its server account", metadata: ["account": "\(account.name)"])
        _ = lchown(root, account.uid, account.gid)
        guard let enumerator = FileManager.default.enumerator(atPath: root) else { return }
        while let relative = enumerator.nextObject() as? String {
            _ = lchown(root + "/" + relative, account.uid, account.gid)
        }
    }

    /// The first folder above `path` that `account` may not pass. A folder still to be made is
    /// made by this process (0755) when `missingIsReachable`, and so lets it through.
    private static func firstUnreachableAncestor(of path: String, for account: Account, missingIsReachable: Bool = false) -> String? {
        var ancestors: [String] = []
        var current = (path as NSString).deletingLastPathComponent
        while !current.isEmpty {
            ancestors.insert(current, at: 0)
            if current == "/" { break }
            current = (current as NSString).deletingLastPathComponent
        }
        for ancestor in ancestors {
            var info = stat()
            guard stat(ancestor, &info) == 0 else {
                if missingIsReachable { continue }
                return ancestor
            }
            let mode = info.st_mode
            let allowed: Bool
            if info.st_uid == account.uid {
                allowed = mode & S_IXUSR != 0
            } else if account.groups.contains(info.st_gid) {
                allowed = mode & S_IXGRP != 0
            } else {
                allowed = mode & S_IXOTH != 0
            }
            if !allowed { return ancestor }
        }
        return nil
    }

    /// The major version recorded in `data/PG_VERSION`, or nil when there is no cluster yet.
    private func existingClusterMajorVersion() throws -> String? {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: dataDirectory, isDirectory: &isDirectory) else { return nil }
        if let version = try? String(contentsOfFile: dataDirectory + "/PG_VERSION", encoding: .utf8) {
            return version.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        // data/ only ever appears by renaming a finished initdb, so an empty one was made by hand.
        if isDirectory.boolValue, (try? FileManager.default.contentsOfDirectory(atPath: dataDirectory))?.isEmpty == true {
            try? FileManager.default.removeItem(atPath: dataDirectory)
            return nil
        }
        throw EmbeddedPostgresError(
            .badDirectory,
            "\(dataDirectory) exists but is not a PostgreSQL data folder (it has no PG_VERSION): move it away, "
                + "or choose another directory for the embedded cluster"
        )
    }

    private func initializeCluster(binaries: Binaries, runner: CommandRunner) throws {
        logger.info("creating the embedded PostgreSQL cluster", metadata: ["bindir": "\(binaries.directory)"])
        // initdb works in a side folder that is renamed into place when complete, so a process killed
        // half way through leaves nothing that looks like a cluster.
        try? FileManager.default.removeItem(atPath: initdbDirectory)
        var arguments = [
            "-D", initdbDirectory, "--auth=trust", "-U", configuration.user, "--encoding=UTF8", "--locale=C",
        ]
        if configuration.extraServerSettings["fsync"]?.lowercased() == "off" {
            arguments.append("--no-sync")  // a throwaway cluster: skip initdb's own fsyncs too
        }
        let result = try runner.run(binaries.initdb, arguments)
        guard result.status == 0 else {
            try? FileManager.default.removeItem(atPath: initdbDirectory)
            throw EmbeddedPostgresError(
                .initdbFailed,
                "initdb could not create the embedded PostgreSQL cluster in \(dataDirectory) (exit \(result.status)): "
                    + "see its output below, fix the cause, and run again\n\(result.output.trimmingCharacters(in: .whitespacesAndNewlines))"
            )
        }
        guard rename(initdbDirectory, dataDirectory) == 0 else {
            throw EmbeddedPostgresError(
                .initdbFailed,
                "could not move the new cluster into \(dataDirectory) (\(String(cString: strerror(errno)))): "
                    + "check the folder's permissions and run again"
            )
        }
    }

    private struct RunningServer {
        var pid: Int32
        var port: Int
        var socketDirectory: String
    }

    /// The server already running on the data folder, if any. Waits for one that is starting up,
    /// and for one that is shutting down to be gone.
    private func runningServer(binaries: Binaries, runner: CommandRunner) throws -> RunningServer? {
        let deadline = Date().addingTimeInterval(60)
        while true {
            guard let pidFile = PIDFile.read(postmasterPIDFile) else { return nil }
            if !isOurPostmaster(pidFile.pid) {
                removeStaleLockFiles(knownStale: pidFile.pid)
                return nil
            }
            // > pg_ctl status: exit status 0 if a server is running, 3 if not, 4 if the data folder
            // > is not accessible.
            let status = try runner.run(binaries.pgCtl, ["status", "-D", dataDirectory])
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
                Thread.sleep(forTimeInterval: 0.2)
            }
        }
    }

    /// Whether `pid` is a live postmaster of this very data folder. A PID file left by a crash can
    /// name a PID the system has since given to another process (containers restart with small
    /// PIDs): pg_ctl and postgres then believe a server is running and refuse to start. On Linux the
    /// postmaster's working directory is its data folder (it chdirs there), which tells them apart.
    private func isOurPostmaster(_ pid: Int32) -> Bool {
        guard pid > 0 else { return false }
        if kill(pid, 0) != 0 && errno == ESRCH { return false }
        guard FileManager.default.fileExists(atPath: "/proc/self/cwd") else {
            return true  // no /proc (macOS): trust pg_ctl status
        }
        guard let cwd = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/cwd") else {
            return false  // gone, or another user's process: not our server
        }
        return Self.realPath(cwd) == Self.realPath(dataDirectory)
    }

    private func removeStaleLockFiles(knownStale pid: Int32) {
        logger.info("removing the PID file of an embedded PostgreSQL server that is no longer running", metadata: ["pid": "\(pid)"])
        _ = unlink(postmasterPIDFile)
        removeStaleSocketLockIfAny()
    }

    private func startServer(binaries: Binaries, runner: CommandRunner) throws {
        rotateLogIfLarge()
        removeStaleSocketLockIfAny()
        var settings: [(String, String)] = [
            ("listen_addresses", ""),  // no TCP: the Unix socket in the private folder only
            // The list syntax of unix_socket_directories takes a double-quoted element verbatim.
            ("unix_socket_directories", "\"" + directory.replacingOccurrences(of: "\"", with: "\"\"") + "\""),
        ]
        settings += configuration.extraServerSettings.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
        // pg_ctl hands -o to /bin/sh (`exec postgres <options>`), hence the shell quoting.
        let options = (["-p", "\(configuration.port)"] + settings.flatMap { ["-c", "\($0.0)=\($0.1)"] })
            .map(Self.shellQuote).joined(separator: " ")
        logger.info("starting the embedded PostgreSQL server", metadata: ["log": "\(logFile)"])
        let result = try runner.run(
            binaries.pgCtl, ["start", "-w", "-t", "120", "-D", dataDirectory, "-l", logFile, "-o", options]
        )
        guard result.status == 0 else {
            throw EmbeddedPostgresError(
                .startFailed,
                "the embedded PostgreSQL server in \(dataDirectory) did not start (pg_ctl exit \(result.status)): read "
                    + "the server log below, fix the cause, and run again; pg_ctl said: "
                    + result.output.trimmingCharacters(in: .whitespacesAndNewlines),
                serverLogTail: tail(of: logFile)
            )
        }
        if let pidFile = PIDFile.read(postmasterPIDFile) {
            try? "\(pidFile.pid)\n".write(toFile: markerFile, atomically: true, encoding: .utf8)
        }
    }

    /// The socket's lock file holds the postmaster's PID too, and postgres refuses it the same way.
    private func removeStaleSocketLockIfAny() {
        let socketLock = "\(directory)/.s.PGSQL.\(configuration.port).lock"
        if let lock = PIDFile.read(socketLock), !isOurPostmaster(lock.pid) {
            _ = unlink(socketLock)
            _ = unlink("\(directory)/.s.PGSQL.\(configuration.port)")
        }
    }

    private func stopServer(mode: ShutdownMode, binaries: Binaries, runner: CommandRunner) throws {
        logger.info("stopping the embedded PostgreSQL server", metadata: ["mode": "\(mode.rawValue)"])
        let result = try runner.run(binaries.pgCtl, ["stop", "-D", dataDirectory, "-m", mode.rawValue, "-w", "-t", "60"])
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

    private func createDatabaseIfMissing(binaries: Binaries, socketDirectory: String, port: Int) throws {
        // psql runs as this process's user: root reaches the socket through the 0700 folder anyway.
        let runner = CommandRunner(account: nil, workingDirectory: directory, logger: logger)
        let maintenance = Self.conninfo([
            ("host", socketDirectory), ("port", "\(port)"), ("user", configuration.user), ("dbname", "postgres"),
        ])
        // \gexec runs the CREATE only when the SELECT returns a row; :'db' quotes the name as a literal.
        let script = """
            SELECT format('CREATE DATABASE %I', :'db')
             WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'db') \\gexec

            """
        let result = try runner.run(
            binaries.psql, ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-v", "db=\(configuration.database)", "-d", maintenance, "-f", "-"],
            input: script
        )
        guard result.status == 0 else {
            throw EmbeddedPostgresError(
                .createDatabaseFailed,
                "could not create the database '\(configuration.database)' in the embedded PostgreSQL server: "
                    + "see the message below and the server log \(logFile); psql said: "
                    + result.output.trimmingCharacters(in: .whitespacesAndNewlines)
            )
        }
    }

    private func rotateLogIfLarge() {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: logFile),
              let size = attributes[.size] as? NSNumber, size.intValue > 10 * 1024 * 1024
        else { return }
        _ = unlink(logFile + ".1")
        _ = rename(logFile, logFile + ".1")
    }

    private func tail(of path: String, lines: Int = 30) -> String? {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        let tail = text.split(separator: "\n", omittingEmptySubsequences: false).suffix(lines + 1)
        return tail.joined(separator: "\n").trimmingCharacters(in: .whitespacesAndNewlines)
    }

    // MARK: - Helpers

    static func absolutePath(_ path: String) -> String {
        let url = path.hasPrefix("/")
            ? URL(fileURLWithPath: path)
            : URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent(path)
        var result = url.standardizedFileURL.path
        while result.count > 1 && result.hasSuffix("/") { result.removeLast() }
        return result
    }

    static func realPath(_ path: String) -> String {
        guard let resolved = realpath(path, nil) else { return path }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    static func shellQuote(_ word: String) -> String {
        "'" + word.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }

    /// A libpq `key=value` conninfo with every value single-quoted:
    /// > Single quotes and backslashes within a value must be escaped with a backslash. (libpq, 34.1.1)
    static func conninfo(_ pairs: [(String, String)]) -> String {
        pairs.map { key, value in
            let escaped = value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'")
            let needsQuotes = escaped.isEmpty || escaped.contains(where: { $0 == " " || $0 == "'" || $0 == "\\" || $0 == "=" })
            return "\(key)=" + (needsQuotes ? "'\(escaped)'" : escaped)
        }.joined(separator: " ")
    }
}

// MARK: - Errors

/// Something went wrong with the embedded server; `description` says what to do next.
public struct EmbeddedPostgresError: Error, CustomStringConvertible {
    public enum Code: String, Sendable {
        case binariesNotFound
        case versionMismatch
        case badDirectory
        case directoryUnreachable
        case socketPathTooLong
        case noUnprivilegedAccount
        case commandFailed
        case initdbFailed
        case startFailed
        case createDatabaseFailed
        case stopFailed
    }

    public let code: Code
    public let message: String
    /// The last lines of server.log, when the server was involved.
    public let serverLogTail: String?

    init(_ code: Code, _ message: String, serverLogTail: String? = nil) {
        self.code = code
        self.message = message
        self.serverLogTail = serverLogTail
    }

    public var description: String {
        guard let serverLogTail, !serverLogTail.isEmpty else { return message }
        return message + "\n--- last lines of the server log ---\n" + serverLogTail
    }
}

// MARK: - Server binaries

extension EmbeddedPostgres {
    struct Binaries: Sendable {
        var directory: String
        var initdb: String { directory + "/initdb" }
        var pgCtl: String { directory + "/pg_ctl" }
        /// psql sits beside initdb in every layout we know (Debian's /usr/lib/postgresql/N/bin, Homebrew,
        /// the PGDG RPMs); PATH is the fallback for a hand-made bin folder with the server programs only.
        var psql: String {
            let beside = directory + "/psql"
            if FileManager.default.isExecutableFile(atPath: beside) { return beside }
            return searchPath(for: "psql") ?? beside
        }

        /// `ZONEFEED_PG_BINDIR`, else the version an existing cluster needs from /usr/lib/postgresql,
        /// else `pg_config --bindir`, else the highest /usr/lib/postgresql/*/bin, else PATH.
        static func locate(preferredMajorVersion: String?, logger: Logger) throws -> Binaries {
            if let explicit = ProcessInfo.processInfo.environment["ZONEFEED_PG_BINDIR"], !explicit.isEmpty {
                guard hasServerPrograms(explicit) else {
                    throw EmbeddedPostgresError(
                        .binariesNotFound,
                        "ZONEFEED_PG_BINDIR is \(explicit), which has no initdb and pg_ctl: point it at the bin folder "
                            + "of a PostgreSQL server installation, or unset it"
                    )
                }
                return Binaries(directory: EmbeddedPostgres.absolutePath(explicit))
            }
            if let preferredMajorVersion, hasServerPrograms("/usr/lib/postgresql/\(preferredMajorVersion)/bin") {
                return Binaries(directory: "/usr/lib/postgresql/\(preferredMajorVersion)/bin")
            }
            if let pgConfig = searchPath(for: "pg_config"),
               let bindir = try? CommandRunner(account: nil, workingDirectory: "/", logger: logger).run(pgConfig, ["--bindir"]),
               bindir.status == 0 {
                let directory = bindir.output.trimmingCharacters(in: .whitespacesAndNewlines)
                if hasServerPrograms(directory) { return Binaries(directory: directory) }
            }
            let debianRoot = "/usr/lib/postgresql"
            let versions = ((try? FileManager.default.contentsOfDirectory(atPath: debianRoot)) ?? [])
                .filter { hasServerPrograms("\(debianRoot)/\($0)/bin") }
                .sorted { $0.compare($1, options: .numeric) == .orderedAscending }
            if let highest = versions.last {
                return Binaries(directory: "\(debianRoot)/\(highest)/bin")
            }
            if let initdb = searchPath(for: "initdb") {
                let directory = (EmbeddedPostgres.realPath(initdb) as NSString).deletingLastPathComponent
                if hasServerPrograms(directory) { return Binaries(directory: directory) }
                let unresolved = (initdb as NSString).deletingLastPathComponent
                if hasServerPrograms(unresolved) { return Binaries(directory: unresolved) }
            }
            throw EmbeddedPostgresError(
                .binariesNotFound,
                "the embedded database needs the PostgreSQL server programs (initdb, pg_ctl), and none were found: install "
                    + "the server (Debian/Ubuntu: apt-get install -y postgresql; macOS: brew install postgresql@16), or set "
                    + "ZONEFEED_PG_BINDIR to its bin folder"
            )
        }

        static func hasServerPrograms(_ directory: String) -> Bool {
            FileManager.default.isExecutableFile(atPath: directory + "/initdb")
                && FileManager.default.isExecutableFile(atPath: directory + "/pg_ctl")
        }

        /// The major version of these binaries, from `pg_ctl --version` ("pg_ctl (PostgreSQL) 15.18 …").
        func majorVersion(runner: CommandRunner) throws -> String? {
            let result = try runner.run(pgCtl, ["--version"])
            guard result.status == 0, let range = result.output.range(of: "(PostgreSQL) ") else { return nil }
            let version = result.output[range.upperBound...].prefix { $0.isNumber || $0 == "." }
            let parts = version.split(separator: ".")
            guard let first = parts.first else { return nil }
            // Before PostgreSQL 10 the major version had two parts (9.6).
            if first == "9", parts.count > 1 { return "9.\(parts[1])" }
            return String(first)
        }
    }
}

private func searchPath(for program: String) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
    for directory in path.split(separator: ":") where !directory.isEmpty {
        let candidate = "\(directory)/\(program)"
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
    }
    return nil
}

// MARK: - Running commands

extension EmbeddedPostgres {
    /// Runs a program, as the server's account when this process is root, with PG* variables removed
    /// (the commands get every connection setting explicitly) and messages in English (LC_ALL=C).
    ///
    /// Not Foundation's `Process`: on Linux it learns that a child ended when a socket the child
    /// inherits is closed, and the postmaster that `pg_ctl start` leaves behind inherits it too, so
    /// `waitUntilExit()` would wait for the server to stop. Here the child gets stdin, stdout and stderr
    /// and nothing else (closefrom), its output goes to an unlinked temporary file rather than a pipe
    /// (no waiting for an EOF that a daemon could withhold), and the parent waits with waitpid.
    struct CommandRunner {
        var account: Account?
        var workingDirectory: String
        var logger: Logger

        struct Result {
            var status: Int32
            var output: String
        }

        func run(_ executable: String, _ arguments: [String], input: String? = nil) throws -> Result {
            var launchPath = executable
            var launchArguments = arguments
            if let account {
                launchPath = try runuserPath(for: account)
                launchArguments = ["-u", account.name, "--", executable] + arguments
            }
            logger.debug("running", metadata: ["command": "\(([launchPath] + launchArguments).joined(separator: " "))"])

            let output = try anonymousFile(contents: nil)
            defer { _ = close(output) }
            let stdin = try input.map { try anonymousFile(contents: $0) } ?? open("/dev/null", O_RDONLY | O_CLOEXEC)
            defer { _ = close(stdin) }

            let pid = try spawn(
                launchPath, launchArguments, environment: childEnvironment(), workingDirectory: workingDirectory,
                stdin: stdin, stdout: output, stderr: output
            )
            let status = waitForExit(pid)
            return Result(status: status, output: readAll(output))
        }

        private func runuserPath(for account: Account) throws -> String {
            let candidates = ["/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser", "/bin/runuser"]
            if let found = candidates.first(where: FileManager.default.isExecutableFile(atPath:)) ?? searchPath(for: "runuser") {
                return found
            }
            throw EmbeddedPostgresError(
                .commandFailed,
                "PostgreSQL refuses to run as root and runuser (util-linux) was not found to run it as "
                    + "'\(account.name)': install util-linux, or run zonefeed as a regular user"
            )
        }
    }
}

fileprivate func childEnvironment() -> [String: String] {
    var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("PG") }
    environment["LC_ALL"] = "C"
    return environment
}

/// A temporary file that is already unlinked, holding `contents`, positioned at its start.
private func anonymousFile(contents: String?) throws -> Int32 {
    let folder = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
    var template = Array("\(folder)/zonefeed-XXXXXX".utf8CString)
    let descriptor = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
    guard descriptor >= 0 else {
        throw EmbeddedPostgresError(
            .commandFailed, "could not create a temporary file in \(folder) (\(String(cString: strerror(errno)))): check TMPDIR"
        )
    }
    _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
    template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
    if let contents {
        let bytes = Array(contents.utf8)
        var written = 0
        while written < bytes.count {
            let result = bytes[written...].withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if result < 0 && errno == EINTR { continue }
            guard result > 0 else { break }
            written += result
        }
        _ = lseek(descriptor, 0, SEEK_SET)
    }
    return descriptor
}

private func readAll(_ descriptor: Int32) -> String {
    _ = lseek(descriptor, 0, SEEK_SET)
    var data = [UInt8]()
    var buffer = [UInt8](repeating: 0, count: 16 * 1024)
    while true {
        let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        if count < 0 && errno == EINTR { continue }
        guard count > 0 else { break }
        data.append(contentsOf: buffer[0..<count])
    }
    return String(decoding: data, as: UTF8.self)
}

/// posix_spawn with the three standard descriptors and no others, default signal handling and an
/// empty signal mask (whatever this process blocks or ignores is not the server's business).
fileprivate func spawn(
    _ path: String, _ arguments: [String], environment: [String: String], workingDirectory: String?,
    stdin: Int32, stdout: Int32, stderr: Int32, newProcessGroup: Bool = false
) throws -> pid_t {
    #if canImport(Darwin)
    var actions: posix_spawn_file_actions_t? = nil
    var attributes: posix_spawnattr_t? = nil
    #else
    var actions = posix_spawn_file_actions_t()
    var attributes = posix_spawnattr_t()
    #endif
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }

    posix_spawn_file_actions_adddup2(&actions, stdin, 0)
    posix_spawn_file_actions_adddup2(&actions, stdout, 1)
    posix_spawn_file_actions_adddup2(&actions, stderr, 2)

    var flags = Int32(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)
    #if canImport(Darwin)
    if let workingDirectory { posix_spawn_file_actions_addchdir_np(&actions, workingDirectory) }
    flags |= Int32(POSIX_SPAWN_CLOEXEC_DEFAULT)
    #else
    if let workingDirectory, let addchdir = GlibcSpawnExtensions.addchdir {
        _ = addchdir(&actions, workingDirectory)
    }
    if let addclosefrom = GlibcSpawnExtensions.addclosefrom {
        _ = addclosefrom(&actions, 3)
    } else {
        // Before glibc 2.34: close what is open now, one by one.
        let open = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        for descriptor in open.compactMap({ Int32($0) }) where descriptor > 2 {
            posix_spawn_file_actions_addclose(&actions, descriptor)
        }
    }
    #endif
    if newProcessGroup {
        flags |= Int32(POSIX_SPAWN_SETPGROUP)
        posix_spawnattr_setpgroup(&attributes, 0)
    }
    posix_spawnattr_setflags(&attributes, Int16(flags))
    var noSignals = sigset_t()
    sigemptyset(&noSignals)
    posix_spawnattr_setsigmask(&attributes, &noSignals)
    var defaultSignals = sigset_t()
    sigemptyset(&defaultSignals)
    for signal in [SIGHUP, SIGINT, SIGQUIT, SIGPIPE, SIGTERM, SIGUSR1, SIGUSR2, SIGCHLD, SIGALRM, SIGTSTP, SIGTTIN, SIGTTOU] {
        sigaddset(&defaultSignals, signal)
    }
    posix_spawnattr_setsigdefault(&attributes, &defaultSignals)

    let argv = ([path] + arguments).map { strdup($0) } + [nil]
    defer { argv.forEach { free($0) } }
    let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer { envp.forEach { free($0) } }

    var pid = pid_t()
    let result = posix_spawn(&pid, path, &actions, &attributes, argv, envp)
    guard result == 0 else {
        throw EmbeddedPostgresError(
            .commandFailed, "could not run \(path) (\(String(cString: strerror(result)))): check the PostgreSQL installation"
        )
    }
    return pid
}

#if !canImport(Darwin)
/// glibc declares these only for _GNU_SOURCE, which Swift's Glibc module does not define, so they
/// are looked up at run time: addchdir_np since glibc 2.29, addclosefrom_np since 2.34.
private enum GlibcSpawnExtensions {
    typealias AddChdir = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32
    typealias AddClosefrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32

    static let addchdir: AddChdir? = dlsym(nil, "posix_spawn_file_actions_addchdir_np").map {
        unsafeBitCast($0, to: AddChdir.self)
    }
    static let addclosefrom: AddClosefrom? = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np").map {
        unsafeBitCast($0, to: AddClosefrom.self)
    }
}
#endif

/// The exit status, or 128 + the signal number for a child killed by a signal (as shells report).
private func waitForExit(_ pid: pid_t) -> Int32 {
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 {
        if errno != EINTR { return -1 }
    }
    // WIFEXITED / WEXITSTATUS / WTERMSIG, which Swift does not import (they are macros).
    let signal = status & 0x7f
    return signal == 0 ? (status >> 8) & 0xff : 128 + signal
}

extension EmbeddedPostgres {
    /// A local account, for running the server when this process is root.
    struct Account: Sendable {
        var name: String
        var uid: uid_t
        var gid: gid_t
        var groups: [gid_t]

        init?(name: String) {
            guard let entry = getpwnam(name) else { return nil }
            self.init(entry: entry.pointee)
        }

        init?(uid: uid_t) {
            guard let entry = getpwuid(uid) else { return nil }
            self.init(entry: entry.pointee)
        }

        private init(entry: passwd) {
            name = String(cString: entry.pw_name)
            uid = entry.pw_uid
            gid = entry.pw_gid
            var count: Int32 = 64
            var list = [gid_t](repeating: 0, count: Int(count))
            #if canImport(Darwin)
            let found = list.withUnsafeMutableBufferPointer { buffer in
                buffer.baseAddress!.withMemoryRebound(to: Int32.self, capacity: buffer.count) {
                    getgrouplist(entry.pw_name, Int32(bitPattern: entry.pw_gid), $0, &count)
                }
            }
            #else
            let found = getgrouplist(entry.pw_name, entry.pw_gid, &list, &count)
            #endif
            groups = found >= 0 ? Array(list.prefix(Int(count))) : [entry.pw_gid]
        }
    }
}

// MARK: - PID files

extension EmbeddedPostgres {
    /// `postmaster.pid` (and the socket lock file, which starts the same way). Its lines, from
    /// PostgreSQL's pidfile.h: PID, data folder, start time, port, socket folder, listen address,
    /// shared memory key, status (`starting`, `stopping`, `ready`, `standby`; PostgreSQL 10 and later).
    struct PIDFile {
        var pid: Int32
        var port: Int?
        var socketDirectory: String?
        var status: String?

        static func read(_ path: String) -> PIDFile? {
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map {
                $0.trimmingCharacters(in: .whitespaces)
            }
            // A negative PID marks a standalone backend (postgres --single).
            guard let first = lines.first, let pid = Int32(first) else { return nil }
            func line(_ number: Int) -> String? { lines.count >= number ? lines[number - 1] : nil }
            return PIDFile(
                pid: abs(pid),
                port: line(4).flatMap { Int($0) },
                socketDirectory: line(5),
                status: line(8).flatMap { $0.isEmpty ? nil : $0 }
            )
        }
    }
}

// MARK: - Locks

private func flockRetryingOnInterrupt(_ descriptor: Int32, _ operation: Int32) -> Int32 {
    while true {
        let result = flock(descriptor, operation)
        if result == 0 || errno != EINTR { return result }
    }
}

private func openLockFile(_ path: String) throws -> Int32 {
    // O_CLOEXEC: the postmaster that pg_ctl forks must never inherit (and so keep) our locks.
    let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
    guard descriptor >= 0 else {
        throw EmbeddedPostgresError(
            .badDirectory,
            "could not open the lock file \(path) (\(String(cString: strerror(errno)))): choose a folder this user can write"
        )
    }
    return descriptor
}

extension EmbeddedPostgres {
    /// An exclusive flock held for the length of a scope (init.lock).
    struct FileLock {
        enum Mode { case exclusive }
        private let descriptor: Int32

        init(path: String, mode: Mode) throws {
            descriptor = try openLockFile(path)
            if flockRetryingOnInterrupt(descriptor, LOCK_EX) != 0 {
                let reason = String(cString: strerror(errno))
                _ = close(descriptor)
                throw EmbeddedPostgresError(.badDirectory, "could not lock \(path) (\(reason)): check the folder's file system supports flock")
            }
        }

        func release() {
            _ = close(descriptor)
        }
    }
}

extension EmbeddedPostgres {
    /// This process's share in a running server: a shared flock on users.lock, given up by `stop` (or
    /// when the last copy of the handle goes away, or when the process ends).
    final class Lease: @unchecked Sendable {
        private let lock = NSLock()
        private var descriptor: Int32

        init(path: String) throws {
            descriptor = try openLockFile(path)
            if flockRetryingOnInterrupt(descriptor, LOCK_SH) != 0 {
                let reason = String(cString: strerror(errno))
                _ = close(descriptor)
                throw EmbeddedPostgresError(.badDirectory, "could not lock \(path) (\(reason)): check the folder's file system supports flock")
            }
        }

        /// The descriptor, once; nil after the first call.
        func take() -> Int32? {
            lock.lock()
            defer { lock.unlock() }
            let taken = descriptor
            descriptor = -1
            return taken >= 0 ? taken : nil
        }

        deinit {
            if descriptor >= 0 { _ = close(descriptor) }
        }
    }
}
