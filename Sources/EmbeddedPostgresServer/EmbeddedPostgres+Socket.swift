import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

extension EmbeddedPostgres {
    /// A socket's path must be shorter than this: `sockaddr_un.sun_path` is 108 bytes on Linux
    /// and 104 on macOS, and PostgreSQL fails to start past it with a message that names no folder.
    static let socketPathLimit = 100

    /// Where a server this process starts puts its socket: in the cluster's folder, unless the
    /// socket's path there would be too long (a project checked out deep in a home folder), then
    /// in a private folder of its own under /tmp, named after the cluster's folder. A server
    /// already running is found wherever its PID file says its socket is.
    var ownSocketDirectory: String {
        "\(directory)/.s.PGSQL.\(configuration.port)".utf8.count < Self.socketPathLimit
            ? directory : Self.tmpSocketPrefix + Self.stableName(of: directory)
    }

    /// The prefix of a socket folder under /tmp.
    static let tmpSocketPrefix = "/tmp/zonefeed-pg-"

    /// Makes the socket's folder under /tmp, when the cluster's own is too long a path, private
    /// to the server's account (`account`, or this user), or takes it when it is that already;
    /// returns the folder the server is to use. The folder's name is known in advance, so
    /// anyone may make it first: anything else there (another user's folder, a link, a folder
    /// others may enter) is not used, since the socket trusts whoever reaches it, and a fresh
    /// folder of a random name is made instead (later processes find it through the PID file).
    func makeSocketDirectory(for account: Account?) throws -> String {
        let path = ownSocketDirectory
        guard path != directory else { return path }
        let owner = account?.uid ?? geteuid()
        if mkdir(path, 0o700) == 0 {
            try give(path, to: account)
            return path
        } else if errno != EEXIST {
            throw EmbeddedPostgresError(
                .badDirectory,
                "could not create \(path), the embedded PostgreSQL socket's folder (the cluster's folder \(directory) is too long a path "
                    + "for a Unix socket): \(String(cString: strerror(errno)))")
        }
        var info = stat()
        if lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR, info.st_uid == owner, info.st_mode & 0o077 == 0 { return path }
        var template = Array((Self.tmpSocketPrefix + "XXXXXX").utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw EmbeddedPostgresError(
                .badDirectory,
                "could not create a folder under /tmp for the socket of the embedded PostgreSQL server of \(directory) (the cluster's "
                    + "folder is too long a path for a Unix socket): \(String(cString: strerror(errno)))")
        }
        let fresh = String(cString: made)
        logger.warning(
            "the embedded PostgreSQL socket's usual folder is not private to this server's account; using another",
            metadata: [
                "usual": "\(path)", "owner": "\(info.st_uid)", "mode": "\(String(info.st_mode & 0o7777, radix: 8))", "using": "\(fresh)",
            ])
        do {
            try give(fresh, to: account)
        } catch {
            _ = rmdir(fresh)
            throw error
        }
        return fresh
    }

    /// A folder this process made (mode 0700) given to the server's account.
    private func give(_ path: String, to account: Account?) throws {
        if let account, lchown(path, account.uid, account.gid) != 0 {
            throw EmbeddedPostgresError(
                .badDirectory,
                "could not give \(path), the embedded PostgreSQL socket's folder, to '\(account.name)' "
                    + "(\(String(cString: strerror(errno)))): remove it and run again")
        }
    }

    /// After the server stopped: its socket folder under /tmp goes too (it is empty then; a
    /// folder that is not is left). The path may come from the PID file, which the server's
    /// account writes: only a folder directly under /tmp of the socket folders' name, and the
    /// server account's (`account`, or this user's), is removed.
    func removeSocketDirectory(_ path: String, account: Account?) {
        guard path != directory, path.hasPrefix(Self.tmpSocketPrefix) else { return }
        let name = path.dropFirst(Self.tmpSocketPrefix.count)
        guard !name.isEmpty, !name.contains("/") else { return }
        var info = stat()
        guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR, info.st_uid == account?.uid ?? geteuid() else { return }
        _ = rmdir(path)
    }
}
