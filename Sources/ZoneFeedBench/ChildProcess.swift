import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A timed child process of `zonefeed bench` (a `zonefeed run`), started with
/// posix_spawn and reaped with wait4, whose rusage is the child's own peak RSS and CPU.
///
/// Hand-written because the bench reports each child's peak RSS, and only wait4's rusage has
/// it: swift-subprocess (which runs every other program zonefeed starts) and Foundation's
/// `Process` reap their children themselves and do not hand the rusage on.
public final class ChildProcess {
    /// Where the child's stdout or stderr goes.
    enum Output {
        /// A file, created or emptied.
        case file(String)
    }

    struct Termination {
        /// The exit status, or 128 + the signal number when a signal ended the child (as shells say).
        var status: Int32
        /// The most memory the child had resident at once.
        var peakRSSBytes: Int
        /// The CPU the child used, in user and in system (kernel) mode.
        var userSeconds: Double
        var systemSeconds: Double
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// What the child is, for messages: "the in-process run".
    let name: String
    let pid: pid_t
    private var termination: Termination?

    /// This program's own executable, so that a child runs exactly the build being measured, even
    /// if the file is replaced meanwhile; and the name it was started by, for the child's argv[0].
    static var currentExecutable: (path: String, name: String) {
        #if os(Linux)
            return ("/proc/self/exe", CommandLine.arguments[0])
        #else
            return (Bundle.main.executablePath ?? CommandLine.arguments[0], CommandLine.arguments[0])
        #endif
    }

    /// Starts `executable.path` (argv[0] `executable.name`) with stdin from /dev/null and the
    /// default handling of every signal: the bench ignores SIGINT and SIGTERM (it ends its
    /// children itself), and an ignored signal would otherwise stay ignored across exec.
    init(
        name: String, executable: (path: String, name: String), arguments: [String], environment: [String: String],
        stdout: Output, stderr: Output
    ) throws {
        self.name = name
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

        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        for (descriptor, output) in [(Int32(1), stdout), (Int32(2), stderr)] {
            switch output {
            case .file(let path):
                posix_spawn_file_actions_addopen(&actions, descriptor, path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
            }
        }

        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        var defaultSignals = sigset_t()
        sigemptyset(&defaultSignals)
        for signal in [SIGHUP, SIGINT, SIGQUIT, SIGPIPE, SIGTERM, SIGUSR1, SIGUSR2, SIGCHLD] { sigaddset(&defaultSignals, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaultSignals)

        let argv = ([executable.name] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for pointer in envp { free(pointer) } }

        Self.resetPeakRSS()
        var pid = pid_t()
        let result = posix_spawn(&pid, executable.path, &actions, &attributes, argv, envp)
        guard result == 0 else {
            throw Failure(description: "could not start \(name) from \(executable.path) (\(String(cString: strerror(result))))")
        }
        self.pid = pid
        Self.running.insert(pid)
    }

    /// Lowers this process's peak RSS to its current RSS, because the kernel counts it in the
    /// child's. At exec, Linux folds the high-water mark of the memory the process had until then
    /// into the `ru_maxrss` that wait4 reports for it, and a posix_spawn child (CLONE_VM) has
    /// until then run in this process's memory: without the reset, every child would report at
    /// least the bench's own peak (the ceiling's encoded rows). What remains is a floor of this
    /// process's current RSS, well below a run's.
    /// > proc(5), /proc/pid/clear_refs: "5 (since Linux 4.0): Reset the peak resident set size
    /// > ("high water mark") to the process's current resident set size value."
    private static func resetPeakRSS() {
        #if os(Linux)
            let descriptor = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC)
            guard descriptor >= 0 else { return }
            _ = write(descriptor, "5", 1)
            _ = close(descriptor)
        #endif
    }

    // MARK: - Ending

    /// Waits for the child to end (once; later calls return the same termination).
    @discardableResult
    func wait() -> Termination {
        if let termination { return termination }
        // Wait without reaping first (WNOWAIT): until it is reaped the child's pid cannot be
        // reused, so `terminateAll` never signals a stranger that happens to get the same pid.
        var info = siginfo_t()
        while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR {}
        Self.running.remove(pid)

        var status: Int32 = 0
        var usage = rusage()
        while wait4(pid, &status, 0, &usage) < 0 && errno == EINTR {}
        // WIFEXITED / WEXITSTATUS / WTERMSIG are macros, which Swift does not import.
        let signal = status & 0x7f
        #if os(Linux)
            let peak = usage.ru_maxrss * 1024  // > getrusage(2): "ru_maxrss … (in kilobytes)"
        #else
            let peak = usage.ru_maxrss  // bytes on macOS
        #endif
        func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1_000_000 }
        let ended = Termination(
            status: signal == 0 ? (status >> 8) & 0xff : 128 + signal, peakRSSBytes: peak, userSeconds: seconds(usage.ru_utime),
            systemSeconds: seconds(usage.ru_stime))
        termination = ended
        return ended
    }

    /// Sends SIGTERM to every child not yet waited for: what the bench does when it is itself
    /// interrupted, so that no `zonefeed run` outlives it (the fake server, run through
    /// swift-subprocess, is ended when its phase unwinds).
    public static func terminateAll() {
        running.each { kill($0, SIGTERM) }
    }

    private static let running = RunningChildren()
}

/// The pids of the children not yet reaped; a signal handler's queue reads it while the bench's
/// thread changes it.
private final class RunningChildren: Sendable {
    private let pids = Mutex<Set<pid_t>>([])

    func insert(_ pid: pid_t) { pids.withLock { _ = $0.insert(pid) } }
    func remove(_ pid: pid_t) { pids.withLock { _ = $0.remove(pid) } }

    /// Holds the lock while `body` runs, so that no pid is removed (and reaped) meanwhile.
    func each(_ body: (pid_t) -> Void) { pids.withLock { for pid in $0 { body(pid) } } }
}
