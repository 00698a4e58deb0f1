import Foundation
import Logging
import Testing

@testable import EmbeddedPostgresServer

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The embedded server makes its folder private (0700, and the server account's as root), since
/// the socket in it trusts whoever reaches it. `zonefeed bench --directory /tmp` did that to /tmp:
/// as root, /tmp lost its 1777 and became postgres's. A folder that holds anything else is now
/// refused and left exactly as it was.
@Test func aFolderThatHoldsOtherFilesIsRefusedAndLeftAsItWas() async throws {
    let folder = try makeTemporaryFolder()
    defer { try? FileManager.default.removeItem(atPath: folder) }
    try "not the embedded server's".write(toFile: folder + "/notes.txt", atomically: false, encoding: .utf8)
    #expect(chmod(folder, 0o1777) == 0)
    let before = try fileStatus(folder)

    let embedded = EmbeddedPostgres(EmbeddedPostgres.Configuration(directory: folder, extraServerSettings: ["fsync": "off"]))
    do {
        let handle = try await embedded.start()
        await embedded.stop(handle, mode: .immediate)
        Issue.record("the embedded server started in \(folder), which holds a file of its own")
    } catch let error as EmbeddedPostgresError {
        #expect(error.code == .badDirectory)
        #expect(
            error.message
                == "the embedded PostgreSQL folder \(folder) already holds files that are not the embedded server's "
                + "(notes.txt), and the server would make it private to itself (mode 0700): give an empty or new "
                + "folder, for example \(folder)/zonefeed-postgres")
    }

    let after = try fileStatus(folder)
    #expect(after.st_mode & 0o7777 == 0o1777)
    #expect(after.st_uid == before.st_uid)
    #expect(after.st_gid == before.st_gid)
    #expect(try FileManager.default.contentsOfDirectory(atPath: folder) == ["notes.txt"])
}

/// The folder is refused when it is a link to a folder (its target is whoever's), and when
/// it belongs to another user: the server's socket trusts whoever reaches it. Another user's
/// empty folder was taken before, its chmod failing unnoticed. (Another owner is had here by
/// leaving this user out of the owners allowed: a test that is not root can make no folder of
/// another user's.)
@Test func aFolderOfAnotherUserOrALinkToOneIsRefused() async throws {
    let folder = try makeTemporaryFolder()
    defer { try? FileManager.default.removeItem(atPath: folder) }
    // Reachable by the server's account as root, so that the cluster is not put elsewhere.
    #expect(chmod(folder, 0o755) == 0)
    let target = folder + "/elsewhere"
    try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: false)
    #expect(chmod(target, 0o755) == 0)
    try FileManager.default.createSymbolicLink(atPath: folder + "/linked", withDestinationPath: target)
    let linked = EmbeddedPostgres(EmbeddedPostgres.Configuration(directory: folder + "/linked", extraServerSettings: ["fsync": "off"]))
    #expect(!linked.isRelocated)
    let link = try #require(throws: EmbeddedPostgresError.self) { try linked.createDirectory() }
    #expect(link.code == .badDirectory && link.message.contains("is a symbolic link or not a folder"), "\(link)")
    // Refused before its mode was changed: chmod follows the link, and made what it pointed at
    // (as root, any empty folder) private first.
    #expect(try FileManager.default.attributesOfItem(atPath: target)[.posixPermissions] as? Int == 0o755, "the folder pointed at is left as it was")

    let own = EmbeddedPostgres(EmbeddedPostgres.Configuration(directory: target, extraServerSettings: ["fsync": "off"]))
    try own.createDirectory()
    let others = try #require(throws: EmbeddedPostgresError.self) { try own.checkFolderIsPrivate(toOwnersAmong: [geteuid() &+ 1]) }
    #expect(others.code == .badDirectory && others.message.contains("belongs to another user (uid \(geteuid()))"), "\(others)")
    #expect(chmod(target, 0o750) == 0)
    let open = try #require(throws: EmbeddedPostgresError.self) { try own.checkFolderIsPrivate(toOwnersAmong: [geteuid()]) }
    #expect(open.message.contains("could not be made private (mode 750)"), "\(open)")
}

/// An empty folder someone made for the cluster is taken, and so is the folder once it holds a
/// cluster: the second start finds only what the first one left there.
@Test func anEmptyFolderIsTakenAndMadePrivateAndTakenAgainOnceItHoldsACluster() async throws {
    let folder = try makeTemporaryFolder()
    defer { try? FileManager.default.removeItem(atPath: folder) }
    #expect(chmod(folder, 0o755) == 0)
    let embedded = EmbeddedPostgres(EmbeddedPostgres.Configuration(directory: folder, extraServerSettings: ["fsync": "off"]))

    for _ in 1...2 {
        let handle = try await embedded.start()
        await embedded.stop(handle, mode: .immediate)
        let taken = try fileStatus(folder)
        #expect(taken.st_mode & 0o7777 == 0o700)
        let owner = geteuid() == 0 ? try #require(EmbeddedPostgres.defaultServerAccount).uid : geteuid()
        #expect(taken.st_uid == owner)
    }
}

/// A cluster's folder too long a path for a Unix socket (a project checked out deep in a home
/// folder) was refused, and `url: embedded` offered no way to choose another. The socket now goes
/// to a private folder under /tmp named after the cluster's, where a second process finds it; a
/// folder of that name that is not private is not used, and another is made.
@Test func aClusterInAFolderTooLongForASocketPathKeepsItsSocketInAPrivateFolderUnderTmp() async throws {
    let top = try makeTemporaryFolder()
    defer { try? FileManager.default.removeItem(atPath: top) }
    #expect(chmod(top, 0o755) == 0)
    let folder = top + "/" + String(repeating: "a-deeply-nested-checkout/", count: 4) + "zonefeed/postgres"
    #expect("\(folder)/.s.PGSQL.5432".utf8.count >= 100, "a path too long for sun_path")
    try FileManager.default.createDirectory(atPath: (folder as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
    var ancestor = (folder as NSString).deletingLastPathComponent
    while ancestor.count > top.count {
        #expect(chmod(ancestor, 0o755) == 0)
        ancestor = (ancestor as NSString).deletingLastPathComponent
    }
    let embedded = EmbeddedPostgres(EmbeddedPostgres.Configuration(directory: folder, extraServerSettings: ["fsync": "off"]))
    #expect(!embedded.isRelocated)
    let socketFolder = embedded.ownSocketDirectory
    #expect(socketFolder.hasPrefix("/tmp/zonefeed-pg-"))
    defer { try? FileManager.default.removeItem(atPath: socketFolder) }

    // Started (which creates the database through the socket), and found by a second process
    // from the server's PID file alone.
    let handle = try await embedded.start()
    #expect(handle.startedByUs)
    #expect(handle.socketDirectory == socketFolder)
    #expect(handle.connectionString.contains("host=\(socketFolder)"), "\(handle.connectionString)")
    let socket = try fileStatus("\(socketFolder)/.s.PGSQL.5432")
    #expect(socket.st_mode & S_IFMT == S_IFSOCK)
    let folderStatus = try fileStatus(socketFolder)
    #expect(folderStatus.st_mode & 0o777 == 0o700)
    let owner = geteuid() == 0 ? try #require(EmbeddedPostgres.defaultServerAccount).uid : geteuid()
    #expect(folderStatus.st_uid == owner)
    let second = try await EmbeddedPostgres(EmbeddedPostgres.Configuration(directory: folder)).start()
    #expect(!second.startedByUs)
    #expect(second.socketDirectory == socketFolder)
    await embedded.stop(second)
    await embedded.stop(handle, mode: .immediate)

    #expect(!FileManager.default.fileExists(atPath: socketFolder), "the socket's folder goes with the server")

    // Its name is known in advance, so anyone may make it first (here another account, or a
    // folder others may enter): that is no place for a socket that trusts whoever reaches it,
    // and no reason not to start either. The server starts with its socket in a fresh private
    // folder, and leaves the other as it was.
    #expect(mkdir(socketFolder, 0o755) == 0)
    #expect(chmod(socketFolder, 0o755) == 0)
    if geteuid() == 0 { #expect(chown(socketFolder, 65534, 65534) == 0) }
    let squatted = try fileStatus(socketFolder)
    let aside = try await embedded.start()
    #expect(aside.startedByUs)
    #expect(aside.socketDirectory != socketFolder && aside.socketDirectory.hasPrefix("/tmp/zonefeed-pg-"), "\(aside.socketDirectory)")
    let asideStatus = try fileStatus(aside.socketDirectory)
    #expect(asideStatus.st_mode & 0o777 == 0o700 && asideStatus.st_uid == owner)
    #expect(try fileStatus("\(aside.socketDirectory)/.s.PGSQL.5432").st_mode & S_IFMT == S_IFSOCK)
    let found = try await EmbeddedPostgres(EmbeddedPostgres.Configuration(directory: folder)).start()
    #expect(found.socketDirectory == aside.socketDirectory, "a second process finds it through the PID file")
    let after = try fileStatus(socketFolder)
    #expect(after.st_uid == squatted.st_uid && after.st_mode == squatted.st_mode, "the other folder is left as it was")
    #expect(try FileManager.default.contentsOfDirectory(atPath: socketFolder).isEmpty)
    await embedded.stop(found)
    await embedded.stop(aside, mode: .immediate)
    #expect(!FileManager.default.fileExists(atPath: aside.socketDirectory))

    // A link there, to another server's socket folder: nothing in that folder is touched (a
    // stale-looking lock there was removed, with its socket, before the socket folder was
    // checked).
    #expect(rmdir(socketFolder) == 0)
    let elsewhere = top + "/another-servers-sockets"
    #expect(mkdir(elsewhere, 0o755) == 0)
    #expect(FileManager.default.createFile(atPath: elsewhere + "/.s.PGSQL.5432.lock", contents: Data("999999\n".utf8)))
    #expect(FileManager.default.createFile(atPath: elsewhere + "/.s.PGSQL.5432", contents: Data()))
    #expect(symlink(elsewhere, socketFolder) == 0)
    defer { _ = unlink(socketFolder) }
    let linked = try await embedded.start()
    #expect(linked.socketDirectory != socketFolder && linked.socketDirectory.hasPrefix("/tmp/zonefeed-pg-"))
    await embedded.stop(linked, mode: .immediate)
    #expect(FileManager.default.fileExists(atPath: elsewhere + "/.s.PGSQL.5432.lock"))
    #expect(FileManager.default.fileExists(atPath: elsewhere + "/.s.PGSQL.5432"))
}

/// A new folder under /tmp itself: the socket's path must stay short, and as root the server's
/// account must be able to reach it.
func makeTemporaryFolder() throws -> String {
    var template = Array("/tmp/zonefeed-test-XXXXXX".utf8CString)
    guard let folder = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!).map { String(cString: $0) } }) else {
        throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
    }
    return folder
}

func fileStatus(_ path: String) throws -> stat {
    var info = stat()
    guard stat(path, &info) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
    return info
}

/// The folder's lock files are opened without following a link and must be regular files: the
/// folder is the server account's, and a link it put at `init.lock` made root create a file
/// wherever the link pointed; a FIFO there would have held the open for ever.
@Test func aLockFileThatIsALinkOrAFIFOIsRefusedAndNothingIsMadeWhereItPoints() async throws {
    let folder = "/tmp/zonefeed-locks-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    try FileManager.default.createDirectory(atPath: folder + "/elsewhere", withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: folder) }
    try FileManager.default.createSymbolicLink(atPath: folder + "/init.lock", withDestinationPath: folder + "/elsewhere/made-through-the-link")
    let linked = await #expect(throws: EmbeddedPostgresError.self) { _ = try await EmbeddedPostgres.FileLock.exclusive(path: folder + "/init.lock") }
    #expect(linked?.description.contains("it is a symbolic link") == true, "\(String(describing: linked))")
    #expect(!FileManager.default.fileExists(atPath: folder + "/elsewhere/made-through-the-link"))

    #expect(mkfifo(folder + "/users.lock", 0o600) == 0)
    let fifo = await #expect(throws: EmbeddedPostgresError.self) { _ = try await EmbeddedPostgres.FileLock.exclusive(path: folder + "/users.lock") }
    #expect(fifo?.description.contains("is not a regular file") == true, "\(String(describing: fifo))")

    // A regular file is taken.
    let lock = try await EmbeddedPostgres.FileLock.exclusive(path: folder + "/fine.lock")
    lock.release()
}
