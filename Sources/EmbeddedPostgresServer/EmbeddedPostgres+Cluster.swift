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
    func checkPaths() throws {
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
    }

    /// Makes the cluster's folder private: the socket accepts anyone who can reach it (trust
    /// authentication), so the folder is the gate (0700 here, and the server account's as root in
    /// `prepareDirectory`). That is only for a folder the cluster may have to itself: `--directory
    /// /tmp` took /tmp's 1777 and, as root, gave /tmp to postgres. So an existing folder is taken
    /// only when it is empty or holds nothing but what the embedded server puts there.
    func createDirectory() throws {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue {
            try checkFolderHoldsNothingElse()
        }
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw EmbeddedPostgresError(
                .badDirectory,
                "could not create the embedded PostgreSQL folder \(directory) (\(error.localizedDescription)): "
                    + "choose a folder this user can write"
            )
        }
        // As root, the accounts the server is run as by default: not whoever owns a `data`
        // folder found there, which another user could have made along with the folder.
        var owners: Set<uid_t> = [geteuid()]
        if geteuid() == 0 { owners.formUnion(["postgres", "nobody"].compactMap { Account(name: $0)?.uid }) }
        // The folder itself, and its owner's, before its mode is changed: chmod follows a link,
        // and made the folder a link pointed at (as root, any empty folder) private to its owner
        // before the link was refused.
        try checkFolderIsPrivate(toOwnersAmong: owners, modeToo: false)
        _ = chmod(directory, 0o700)
        try checkFolderIsPrivate(toOwnersAmong: owners)
    }

    /// Refuses the folder unless it is a folder itself (not a link to one), of this user (or, as
    /// root, of the server's account), and private. Another user's empty folder (made in a
    /// shared working directory or in /tmp before zonefeed ran) was taken, its chmod failing
    /// unnoticed: the socket that trusts whoever reaches it then sat in a folder its owner could
    /// enter, read the tokens through, or put a socket of their own in.
    func checkFolderIsPrivate(toOwnersAmong owners: Set<uid_t>, modeToo: Bool = true) throws {
        var info = stat()
        guard lstat(directory, &info) == 0 else {
            throw EmbeddedPostgresError(
                .badDirectory, "could not look at the embedded PostgreSQL folder \(directory) (\(String(cString: strerror(errno))))")
        }
        guard info.st_mode & S_IFMT == S_IFDIR else {
            throw EmbeddedPostgresError(
                .badDirectory,
                "the embedded PostgreSQL folder \(directory) is a symbolic link or not a folder: its server trusts whoever reaches "
                    + "its socket, so it runs only in a folder of this user's own; name the folder itself, or a new one")
        }
        guard owners.contains(info.st_uid) else {
            throw EmbeddedPostgresError(
                .badDirectory,
                "the embedded PostgreSQL folder \(directory) belongs to another user (uid \(info.st_uid)): its server trusts whoever "
                    + "reaches its socket, so it runs only in a folder of this user's own; give a new folder, or remove that one")
        }
        guard !modeToo || info.st_mode & 0o077 == 0 else {
            throw EmbeddedPostgresError(
                .badDirectory,
                "the embedded PostgreSQL folder \(directory) could not be made private (mode \(String(info.st_mode & 0o7777, radix: 8))): "
                    + "its server trusts whoever reaches its socket; give a folder this user owns")
        }
    }

    /// Refuses an existing folder that holds anything the embedded server did not put there. Only
    /// what it makes counts, rather than any sign of a cluster (a data folder, init.lock): a folder
    /// that holds a cluster and other files is not the cluster's alone to make private either.
    private func checkFolderHoldsNothingElse() throws {
        let entries: [String]
        do {
            entries = try FileManager.default.contentsOfDirectory(atPath: directory)
        } catch {
            throw EmbeddedPostgresError(
                .badDirectory,
                "could not list the embedded PostgreSQL folder \(directory) (\(error.localizedDescription)): "
                    + "give a folder this user can read, or a new one"
            )
        }
        let own = Set(
            [dataDirectory, initdbDirectory, logFile, logFile + ".1", initLockFile, usersLockFile, markerFile].map {
                ($0 as NSString).lastPathComponent
            })
        // The socket and its lock file, for whatever port an earlier start used; only beside
        // init.lock, which every start makes before the server runs, so that another server's
        // socket folder is not taken for ours.
        let socketsAreOurs = entries.contains((initLockFile as NSString).lastPathComponent)
        let others = entries.filter { !own.contains($0) && !(socketsAreOurs && $0.hasPrefix(".s.PGSQL.")) }.sorted()
        guard !others.isEmpty else { return }
        let shown = others.prefix(3).joined(separator: ", ") + (others.count > 3 ? ", …" : "")
        throw EmbeddedPostgresError(
            .badDirectory,
            "the embedded PostgreSQL folder \(directory) already holds files that are not the embedded server's "
                + "(\(shown)), and the server would make it private to itself (mode 0700): give an empty or new "
                + "folder, for example \(directory)/zonefeed-postgres"
        )
    }

    /// The major version recorded in `data/PG_VERSION`, or nil when there is no cluster yet.
    func existingClusterMajorVersion() throws -> String? {
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

    func initializeCluster(binaries: Binaries, runner: CommandRunner) async throws {
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
        let result = try await runner.run(binaries.initdb, arguments)
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

    func createDatabaseIfMissing(binaries: Binaries, socketDirectory: String, port: Int) async throws {
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
        let result = try await runner.run(
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

    func rotateLogIfLarge() {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: logFile),
            let size = attributes[.size] as? NSNumber, size.intValue > 10 * 1024 * 1024
        else { return }
        _ = unlink(logFile + ".1")
        _ = rename(logFile, logFile + ".1")
    }

    func tail(of path: String, lines: Int = 30) -> String? {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        let tail = text.split(separator: "\n", omittingEmptySubsequences: false).suffix(lines + 1)
        return tail.joined(separator: "\n").trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
