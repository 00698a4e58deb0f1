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
/// .s.PGSQL.<port>            the Unix socket: the server listens on no TCP address at all (in
///                             /tmp/zonefeed-pg-<hash> when the folder's path is too long for one)
/// server.log                 the server's log (pg_ctl -l), rotated once past 10 MB
/// init.lock                  flock held while a process initializes, starts or stops the server
/// users.lock                 a shared flock held by every process that uses the server (see stop)
/// started-by-zonefeed.pid    the postmaster PID, when zonefeed (not a person) started the server;
///                             `starting <time>` while that start has not seen the server up
/// ```
///
/// PostgreSQL refuses to run as root, so when this process is root the server binaries run as an
/// unprivileged account through `runuser -u <account> --`: the owner of an existing cluster, else
/// `postgres`, else `nobody`.
///
/// `start` and `stop` are async: the programs run through swift-subprocess and the lock waits on a
/// thread of their own, so no cooperative thread blocks while another process initializes.
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
        /// The server programs' folder in place of `ZONEFEED_PG_BINDIR` and the search (tests:
        /// the environment is the whole process's).
        var binDirectory: String?

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

    /// Whether the cluster lives elsewhere than the folder asked for: as root, when the server's
    /// account cannot reach that folder.
    public var isRelocated: Bool { requestedDirectory != configuration.directory }

    /// Where the cluster is, and why there when it is not in the folder asked for: what
    /// `validate`, `status` and the run's log say, so that nobody has to guess.
    public var whereabouts: String {
        guard isRelocated else { return configuration.directory }
        let account = Self.defaultServerAccount.map { "'\($0.name)'" } ?? "another account"
        return "\(configuration.directory) (PostgreSQL runs as \(account), which cannot reach \(requestedDirectory))"
    }

    /// How to remove the cluster, data and all, as a shell command a person can paste.
    public var removalCommand: String { "rm -rf \(Self.shellQuote(configuration.directory))" }

    /// Where the cluster for `directory` lives when the server's account cannot reach it: short
    /// enough for the Unix socket's path, and the same for the same folder.
    static func relocatedDirectory(for directory: String) -> String {
        "/var/lib/zonefeed/postgres-" + stableName(of: directory)
    }

    /// The same short name for the same folder: FNV-1a, not a secret.
    static func stableName(of directory: String) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in directory.utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
        }
        return String(hash, radix: 16)
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
    public func start() async throws -> Handle {
        try checkPaths()
        try createDirectory()
        if requestedDirectory != directory {
            logger.notice(
                """
                the embedded PostgreSQL server runs as another account, which cannot reach \(requestedDirectory); its cluster lives in \
                \(directory) (to remove it, with no zonefeed command using it: \(removalCommand))
                """)
        }

        let initLock = try await FileLock.exclusive(path: initLockFile)
        defer { initLock.release() }

        let account = try serverAccount()
        if let account { try await prepareDirectory(for: account) }

        let preferredMajor = try existingClusterMajorVersion()
        let binaries = try await Binaries.locate(preferredMajorVersion: preferredMajor, explicit: configuration.binDirectory, logger: logger)
        let runner = CommandRunner(account: account, workingDirectory: directory, logger: logger)

        if preferredMajor == nil {
            try await initializeCluster(binaries: binaries, runner: runner)
        } else if let preferredMajor, let binariesMajor = try await binaries.majorVersion(runner: runner),
            binariesMajor != preferredMajor
        {
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
        if let running = try await runningServer(binaries: binaries, runner: runner) {
            socketDirectory = running.socketDirectory
            port = running.port
            startedByUs = false
            logger.info("reusing the embedded PostgreSQL server already running", metadata: ["pid": "\(running.pid)"])
        } else {
            socketDirectory = try makeSocketDirectory(for: account)
            try await startServer(binaries: binaries, runner: runner, socketDirectory: socketDirectory)
            port = configuration.port
            startedByUs = true
        }

        let connectionString = Self.conninfo([
            ("host", socketDirectory), ("port", "\(port)"), ("user", configuration.user), ("dbname", configuration.database),
        ])
        do {
            try await createDatabaseIfMissing(binaries: binaries, socketDirectory: socketDirectory, port: port)
            let lease = try Lease(path: usersLockFile)
            return Handle(
                connectionString: connectionString, startedByUs: startedByUs,
                socketDirectory: socketDirectory, port: port, lease: lease
            )
        } catch {
            // Nobody else can be using a server we have just started (we hold init.lock), so do not
            // leave it running behind an error.
            if startedByUs {
                try? await stopServer(mode: .fast, binaries: binaries, runner: runner)
                removeSocketDirectory(socketDirectory, account: account)
            }
            throw error
        }
    }

    /// Runs `body` with the server started (or reused), and lets go of it (`stop(_:)`) on every
    /// path: the scope a command that needs the database for a while wants.
    public func withServer<T>(_ body: (Handle) async throws -> T) async throws -> T {
        let handle = try await start()
        do {
            let value = try await body(handle)
            await stop(handle)
            return value
        } catch {
            await stop(handle)
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
    public func stop(_ handle: Handle) async {
        await stop(handle, mode: .fast)
    }

    public func stop(_ handle: Handle, mode: ShutdownMode) async {
        guard let leaseDescriptor = handle.lease.take() else { return }  // already stopped
        defer { _ = close(leaseDescriptor) }
        do {
            let initLock = try await FileLock.exclusive(path: initLockFile)
            defer { initLock.release() }
            // > Converting a lock (shared to exclusive) is not guaranteed to be atomic: the existing
            // > lock is first removed, and then a new lock is established. (flock(2))
            // Harmless here: we give the lock up either way, and init.lock keeps starters out.
            if flockRetryingOnInterrupt(leaseDescriptor, LOCK_EX | LOCK_NB) != 0 {
                logger.debug("other processes still use the embedded PostgreSQL server; leaving it running")
                return
            }
            // The marker says `starting` when a start of zonefeed's did not see its server up
            // (pg_ctl gave up waiting, or zonefeed was ended meanwhile): the server that came up
            // from it is zonefeed's to stop all the same (`markerNames`).
            guard let postmaster = PIDFile.read(postmasterPIDFile),
                let marker = (try? String(contentsOfFile: markerFile, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines),
                markerNames(postmaster, marker: marker)
            else {
                logger.debug("the embedded PostgreSQL server was not started by zonefeed, or is not running; leaving it")
                return
            }
            let account = try serverAccount()
            let binaries = try await Binaries.locate(
                preferredMajorVersion: try existingClusterMajorVersion(), explicit: configuration.binDirectory, logger: logger
            )
            let runner = CommandRunner(account: account, workingDirectory: directory, logger: logger)
            try await stopServer(mode: mode, binaries: binaries, runner: runner)
            removeSocketDirectory(handle.socketDirectory, account: account)
        } catch {
            logger.warning("could not stop the embedded PostgreSQL server", metadata: ["error": "\(error)"])
        }
    }

    /// For throwaway clusters (tests): starts a small watcher process that waits for this process
    /// to end (normally, by a crash, or by SIGKILL, when atexit handlers never run), then stops the
    /// server at once (SIGQUIT is PostgreSQL's immediate shutdown) and deletes the whole directory.
    /// After a clean exit that already deleted the directory, the watcher does nothing.
    public func deleteWhenThisProcessEnds(_ handle: Handle) async throws {
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
        // Its own process group (setsid), so that a Ctrl-C that ends this process leaves the
        // watcher to clean up; the outer shell returns at once, and nobody waits for the watcher:
        // once this process is gone it is reparented and reaped by init.
        let launcher = CommandRunner(account: nil, workingDirectory: "/", logger: logger)
        let result = try await launcher.run(
            "/bin/sh",
            [
                "-c", "setsid /bin/sh -c \"$1\" zonefeed-embedded-postgres-watcher \"$2\" \"$3\" </dev/null >/dev/null 2>&1 &",
                "sh", script, "\(getpid())", directory,
            ])
        guard result.status == 0 else {
            throw EmbeddedPostgresError(.commandFailed, "could not start the embedded PostgreSQL watcher (exit \(result.status)): \(result.output)")
        }
    }

    // MARK: - Helpers

    static func absolutePath(_ path: String) -> String {
        let url =
            path.hasPrefix("/")
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
        "'" + word.replacingOccurrences(of: "'", with: "'\\''", options: .literal) + "'"
    }

    /// A libpq `key=value` conninfo with every value single-quoted:
    /// > Single quotes and backslashes within a value must be escaped with a backslash. (libpq, 34.1.1)
    static func conninfo(_ pairs: [(String, String)]) -> String {
        pairs.map { key, value in
            let escaped = value.replacingOccurrences(of: "\\", with: "\\\\", options: .literal).replacingOccurrences(of: "'", with: "\\'", options: .literal)
            let needsQuotes = escaped.isEmpty || escaped.contains(where: { $0 == " " || $0 == "'" || $0 == "\\" || $0 == "=" })
            return "\(key)=" + (needsQuotes ? "'\(escaped)'" : escaped)
        }.joined(separator: " ")
    }
}
