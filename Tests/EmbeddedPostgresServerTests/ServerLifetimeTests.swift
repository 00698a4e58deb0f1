import Foundation
import Logging
import Testing

@testable import EmbeddedPostgresServer

/// A server zonefeed started is zonefeed's to stop, even when the start did not see it up.
@Suite struct ServerLifetimeTests {
    /// pg_ctl gives up waiting for a server that goes on starting (a long recovery; zonefeed
    /// ended while it waited): the start fails, and the server comes up anyway. The next run
    /// reuses it, and stops it when it lets go, as it stops a server it saw start. Before, the
    /// marker was written only once pg_ctl said the server was up, so every later run took the
    /// server for one started by hand and left it running for a person to stop.
    @Test func aServerWhoseStartWasNotSeenUpIsStoppedByTheNextRunThatLetsGo() async throws {
        let logger = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
        let real = try await EmbeddedPostgres.Binaries.locate(preferredMajorVersion: nil, logger: logger)
        let cluster = "/tmp/zonefeed-lifetime-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let bin = cluster + "-bin"
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        defer { try? FileManager.default.removeItem(atPath: bin) }
        // The failing start brings a server up before any handle can hand it to the watcher.
        defer { Self.stopAtOnce(cluster) }
        for program in ["initdb", "postgres"] {
            try FileManager.default.createSymbolicLink(atPath: "\(bin)/\(program)", withDestinationPath: "\(real.directory)/\(program)")
        }
        // pg_ctl as it is, except that a start says it failed once the server is up.
        let pgCtl = "#!/bin/sh\n'\(real.directory)/pg_ctl' \"$@\"\nstatus=$?\n[ \"$1\" = start ] && exit 1\nexit $status\n"
        try pgCtl.write(toFile: "\(bin)/pg_ctl", atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: "\(bin)/pg_ctl")

        var configuration = EmbeddedPostgres.Configuration(directory: cluster, extraServerSettings: ["fsync": "off"])
        configuration.binDirectory = bin
        let failing = EmbeddedPostgres(configuration, logger: logger)
        await #expect(throws: EmbeddedPostgresError.self, "pg_ctl said the start failed") { _ = try await failing.start() }

        configuration.binDirectory = real.directory
        let next = EmbeddedPostgres(configuration, logger: logger)
        let handle = try await next.start()
        // The server is stopped, should the stop below not stop it, and its folder deleted when
        // the test process ends.
        try await next.deleteWhenThisProcessEnds(handle)
        #expect(!handle.startedByUs, "the next run reuses the server that came up")
        await next.stop(handle)
        #expect(!FileManager.default.fileExists(atPath: configuration.directory + "/data/postmaster.pid"), "the server is stopped")
    }

    /// As root without CAP_SYS_PTRACE (a container's root), the server account's postmaster's
    /// working directory cannot be read, and a live server was taken for a dead one: its PID
    /// file and socket were removed under it, and it shut itself down. Such a process is told
    /// by what /proc shows anyone: its owner and when it started, which the PID file says.
    @Test func aPostmasterIsKnownByItsOwnerAndStartTimeWhereItsFolderCannotBeRead() async throws {
        let logger = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
        let cluster = "/tmp/zonefeed-lifetime-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let embedded = EmbeddedPostgres(EmbeddedPostgres.Configuration(directory: cluster, extraServerSettings: ["fsync": "off"]), logger: logger)
        defer { Self.stopAtOnce(cluster) }
        let handle = try await embedded.start()
        try await embedded.deleteWhenThisProcessEnds(handle)
        let file = try #require(EmbeddedPostgres.PIDFile.read(cluster + "/data/postmaster.pid"))
        let owner = try #require(EmbeddedPostgres.owner(of: cluster + "/data"))
        let started = try #require(file.startedAt)
        #expect(EmbeddedPostgres.isProcess(file.pid, ownedBy: owner, startedAt: started))
        // Another start time (a PID given to another process since), another owner, no time.
        #expect(!EmbeddedPostgres.isProcess(file.pid, ownedBy: owner, startedAt: started - 60))
        #expect(!EmbeddedPostgres.isProcess(file.pid, ownedBy: owner &+ 1, startedAt: started))
        #expect(!EmbeddedPostgres.isProcess(file.pid, ownedBy: owner, startedAt: nil))
        // The file is the server account's: its worst numbers are refused, not a trap.
        #expect(!EmbeddedPostgres.isProcess(file.pid, ownedBy: owner, startedAt: .min))
        #expect(!EmbeddedPostgres.isProcess(file.pid, ownedBy: owner, startedAt: .max))
        // A process started now is said to have started now.
        let child = Process()
        child.executableURL = URL(fileURLWithPath: "/bin/sleep")
        child.arguments = ["5"]
        let now = Int64(Date().timeIntervalSince1970)
        try child.run()
        defer { child.terminate() }
        let childStarted = try #require(EmbeddedPostgres.processStartTime(child.processIdentifier))
        #expect(abs(childStarted - now) <= 2, "\(childStarted) against \(now)")
        await embedded.stop(handle)
    }

    /// A marker left by a start of zonefeed's that brought no server up (zonefeed ended while
    /// pg_ctl waited) says `starting` and when. A server a person starts on the folder later is
    /// not zonefeed's to stop: it is left running when the run lets go, and stopped once the
    /// marker names it.
    // The last: a marker the server account wrote, whose number would trap a subtraction.
    @Test(arguments: ["starting 1000000000", "starting", "starting -9223372036854775808"])
    func aServerStartedLongAfterAStartThatBroughtNoneUpIsLeftRunning(_ stale: String) async throws {
        let logger = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
        let cluster = "/tmp/zonefeed-lifetime-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let embedded = EmbeddedPostgres(EmbeddedPostgres.Configuration(directory: cluster, extraServerSettings: ["fsync": "off"]), logger: logger)
        defer { Self.stopAtOnce(cluster) }
        let first = try await embedded.start()
        try await embedded.deleteWhenThisProcessEnds(first)
        let pidFile = cluster + "/data/postmaster.pid"
        // As if a start had begun in 2001 (or at a time not said) and brought nothing up, and a
        // person had started this server since.
        try "\(stale)\n".write(toFile: embedded.markerFile, atomically: true, encoding: .utf8)
        await embedded.stop(first)
        #expect(FileManager.default.fileExists(atPath: pidFile), "the server is left running")

        let second = try await embedded.start()
        let pid = try #require(EmbeddedPostgres.PIDFile.read(pidFile)).pid
        try "\(pid)\n".write(toFile: embedded.markerFile, atomically: true, encoding: .utf8)
        await embedded.stop(second)
        #expect(!FileManager.default.fileExists(atPath: pidFile), "a marker that names it lets the run stop it")
    }

    /// Whatever server still runs on `cluster` (a test that failed before its own stop) is
    /// stopped at once (SIGQUIT, PostgreSQL's immediate shutdown), so that no failure leaves one
    /// running until the machine's next clean-up; the folder goes with it once it has stopped.
    /// The process is held by a pidfd before it is looked at, signalled through it only while
    /// /proc names it postgres (a pid left in a stale file may be another process's by now), and
    /// waited for by it: it becomes readable when the process ends (not this process's child).
    static func stopAtOnce(_ cluster: String) {
        if let pid = EmbeddedPostgres.PIDFile.read(cluster + "/data/postmaster.pid")?.pid, let pidfdOpen, let pidfdSendSignal {
            let handle = pidfdOpen(pid, 0)
            if handle >= 0 {
                defer { close(handle) }
                if let name = try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8), name.hasPrefix("postgres"),
                    pidfdSendSignal(handle, SIGQUIT, nil, 0) == 0
                {
                    var ending = pollfd(fd: handle, events: Int16(POLLIN), revents: 0)
                    guard poll(&ending, 1, 10_000) == 1 else { return }
                }
            }
        }
        try? FileManager.default.removeItem(atPath: cluster)
    }

    // glibc's pidfd_open(2) and pidfd_send_signal(2) (2.36), which its Swift module does not
    // bring in (`sys/pidfd.h`); `syscall` is variadic. Nil where the C library lacks them.
    static let pidfdOpen = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "pidfd_open").map {
        unsafeBitCast($0, to: (@convention(c) (pid_t, UInt32) -> Int32).self)
    }
    static let pidfdSendSignal = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "pidfd_send_signal").map {
        unsafeBitCast($0, to: (@convention(c) (Int32, Int32, UnsafeMutableRawPointer?, UInt32) -> Int32).self)
    }
}
