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
    /// The account the server runs as: nil when this process is not root.
    func serverAccount() throws -> Account? {
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
    /// The folder is the cluster's alone by now: `createDirectory` refuses one that holds anything else.
    func prepareDirectory(for account: Account) async throws {
        for path in [directory, logFile, logFile + ".1"] where FileManager.default.fileExists(atPath: path) {
            _ = lchown(path, account.uid, account.gid)
        }
        var info = stat()
        if stat(dataDirectory, &info) == 0, info.st_uid != account.uid {
            try chownRecursively(dataDirectory, to: account)
        }
        let runner = CommandRunner(account: account, workingDirectory: "/", logger: logger)
        let probe = try await runner.run("/bin/sh", ["-c", "test -w \"$1\" && test -x \"$1\"", "sh", directory])
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

    func chownRecursively(_ root: String, to account: Account) throws {
        logger.info("handing the embedded PostgreSQL cluster to its server account", metadata: ["account": "\(account.name)"])
        _ = lchown(root, account.uid, account.gid)
        guard let enumerator = FileManager.default.enumerator(atPath: root) else { return }
        while let relative = enumerator.nextObject() as? String {
            _ = lchown(root + "/" + relative, account.uid, account.gid)
        }
    }

    /// The first folder above `path` that `account` may not pass. A folder still to be made is
    /// made by this process (0755) when `missingIsReachable`, and so lets it through.
    static func firstUnreachableAncestor(of path: String, for account: Account, missingIsReachable: Bool = false) -> String? {
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
