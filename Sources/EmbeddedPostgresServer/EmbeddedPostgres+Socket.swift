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
            ? directory : "/tmp/zonefeed-pg-" + Self.stableName(of: directory)
    }

    /// Makes the socket's folder under /tmp, when the cluster's own is too long a path, private
    /// to the server's account (`account`, or this user), or takes it when it is that already.
    /// Anything else there (another user's folder, a link, a folder others may enter) is refused:
    /// the socket trusts whoever reaches it.
    func makeSocketDirectory(for account: Account?) throws {
        let path = ownSocketDirectory
        guard path != directory else { return }
        let owner = account?.uid ?? geteuid()
        if mkdir(path, 0o700) == 0 {
            if let account, lchown(path, account.uid, account.gid) != 0 {
                throw EmbeddedPostgresError(
                    .badDirectory,
                    "could not give \(path), the embedded PostgreSQL socket's folder, to '\(account.name)' "
                        + "(\(String(cString: strerror(errno)))): remove it and run again")
            }
        } else if errno != EEXIST {
            throw EmbeddedPostgresError(
                .badDirectory,
                "could not create \(path), the embedded PostgreSQL socket's folder (the cluster's folder \(directory) is too long a path "
                    + "for a Unix socket): \(String(cString: strerror(errno)))")
        }
        var info = stat()
        guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR, info.st_uid == owner, info.st_mode & 0o077 == 0 else {
            throw EmbeddedPostgresError(
                .badDirectory,
                "\(path), where the embedded PostgreSQL server of \(directory) keeps its socket (the cluster's folder is too long a path "
                    + "for a Unix socket), is not a folder private to uid \(owner) (it is uid \(info.st_uid)'s, mode "
                    + "\(String(info.st_mode & 0o7777, radix: 8))): have it removed (its owner or root can), or run zonefeed from a "
                    + "folder whose path is shorter"
            )
        }
    }
}
