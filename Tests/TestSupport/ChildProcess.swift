import Foundation
import Subprocess
import Synchronization
import SystemPackage

/// A program a test starts and outlives: swift-subprocess runs it, on an executor of its own, so
/// that neither its start nor its end waits for a thread of the cooperative pool (which other
/// tests' blocking work can hold for seconds), and no thread blocks while it runs.
///
/// `start` returns once the program has been spawned: two programs a test starts one after the
/// other are both running when the second `start` returns. Signals go through the process's
/// pidfd while it has not been reaped, so a signal never reaches another process that was given
/// its number later.
public final class ChildProcess: Sendable {
    /// What the program did; a program ended by a signal reports the signal's number, as
    /// Foundation's `Process` did.
    public typealias Status = Int32

    private enum State {
        case running(Execution<FileDescriptorInput, FileDescriptorOutput, FileDescriptorOutput>)
        case exited
    }

    /// The execution handle, guarded by its lock: set once spawned, cleared once the process has
    /// exited and before swift-subprocess reaps it.
    private final class Handle: Sendable {
        let state = Mutex<State?>(nil)
    }

    private let handle = Handle()
    private let result: Task<Status, any Error>
    public let pid: Int32

    /// A child's standard input, output and error: output and error go to files (never pipes,
    /// so that a server the child starts can never keep a pipe open and hang the test), input
    /// comes from a descriptor the caller owns or from /dev/null. The child gets duplicates;
    /// `close()` closes what these opened once the child has started.
    public struct Descriptors: Sendable {
        let input: FileDescriptor, output: FileDescriptor, error: FileDescriptor
        private let inputIsOurs: Bool

        /// Creates (or empties) `stdout` and `stderr`, which may be one file.
        public init(stdout: String, stderr: String, stdin: Int32? = nil) throws {
            let write: FileDescriptor.AccessMode = .writeOnly
            let options: FileDescriptor.OpenOptions = [.create, .truncate, .append, .closeOnExec]
            output = try FileDescriptor.open(FilePath(stdout), write, options: options, permissions: [.ownerReadWrite, .groupRead, .otherRead])
            error =
                stderr == stdout
                ? output : try FileDescriptor.open(FilePath(stderr), write, options: options, permissions: [.ownerReadWrite, .groupRead, .otherRead])
            if let stdin {
                input = FileDescriptor(rawValue: stdin)
                inputIsOurs = false
            } else {
                input = try FileDescriptor.open("/dev/null", .readOnly, options: .closeOnExec)
                inputIsOurs = true
            }
        }

        public func close() {
            try? output.close()
            if error != output { try? error.close() }
            if inputIsOurs { try? input.close() }
        }
    }

    /// Starts `executable` with `descriptors`, and returns once it runs.
    public init(
        executable: String, arguments: [String], environment: [String: String], workingDirectory: String? = nil,
        descriptors: Descriptors
    ) async throws {
        let handle = self.handle
        let (spawned, spawn) = AsyncThrowingStream.makeStream(of: Int32.self)
        let configuration = Configuration(
            executable: .path(FilePath(executable)),
            arguments: Arguments(arguments),
            // Keys and values, not `K=V` rows: swift-subprocess strdup's a row without a NUL of
            // its own (see EmbeddedPostgresServer's CommandRunner).
            environment: .custom(Dictionary(uniqueKeysWithValues: environment.map { (Environment.Key(stringLiteral: $0.key), $0.value) })),
            workingDirectory: workingDirectory.map { FilePath($0) })
        let executor = DedicatedExecutor(label: "child-\(URL(fileURLWithPath: executable).lastPathComponent)")
        result = Task(executorPreference: executor) {
            do {
                let outcome = try await Subprocess.run(
                    configuration,
                    input: .fileDescriptor(descriptors.input, closeAfterSpawningProcess: false),
                    output: .fileDescriptor(descriptors.output, closeAfterSpawningProcess: false),
                    error: .fileDescriptor(descriptors.error, closeAfterSpawningProcess: false)
                ) { execution in
                    handle.state.withLock { $0 = .running(execution) }
                    spawn.yield(execution.processIdentifier.value)
                    spawn.finish()
                    // Stays until the process has exited, without reaping it: swift-subprocess
                    // reaps once this returns, and a signal sent before then cannot go astray.
                    while !Self.hasExited(execution.processIdentifier.value) {
                        try? await Task.sleep(for: .milliseconds(10))
                    }
                    handle.state.withLock { $0 = .exited }
                }
                switch outcome.terminationStatus {
                case .exited(let code): return code
                case .signaled(let signal): return signal
                }
            } catch {
                handle.state.withLock { $0 = .exited }
                spawn.finish(throwing: error)
                throw error
            }
        }
        var pid: Int32?
        for try await value in spawned { pid = value }
        guard let pid else { throw FakeServerError(message: "\(executable) did not start") }
        self.pid = pid
    }

    /// Whether the process has exited (a zombie not yet reaped counts as exited), asked without
    /// reaping it.
    private static func hasExited(_ pid: Int32) -> Bool {
        var info = siginfo_t()  // zeroed: waitid leaves it so while the process runs
        guard waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 else { return true }
        return info.si_signo == SIGCHLD
    }

    public var isRunning: Bool {
        handle.state.withLock { if case .running = $0 { true } else { false } }
    }

    /// Sends `signal` unless the process has exited.
    public func signal(_ signal: Int32) {
        handle.state.withLock {
            if case .running(let execution) = $0 { try? execution.send(signal: Signal(rawValue: signal)) }
        }
    }

    /// Waits for the process to end, suspended rather than blocking.
    public func wait() async throws -> Status {
        try await result.value
    }
}
