import Foundation

/// The built `zonefeed` executable, run as a user runs it. Its output goes to files, not pipes,
/// so a server it starts can never keep a pipe open and hang the test.
public struct ZonefeedBinary {
    public struct Output: Sendable {
        public var status: Int32
        public var stdout: String
        public var stderr: String
    }

    /// `swift build` puts the executable beside the test bundle.
    public static var path: String {
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var dir = URL(fileURLWithPath: exe).deletingLastPathComponent()
        for _ in 0..<4 {
            let candidate = dir.appendingPathComponent("zonefeed").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            dir = dir.deletingLastPathComponent()
        }
        return URL(fileURLWithPath: exe).deletingLastPathComponent().appendingPathComponent("zonefeed").path
    }

    public let directory: URL
    public var environment: [String: String]

    /// A fresh working directory under `parent` (/tmp: reachable by the embedded server's account).
    public init(environment: [String: String] = [:], parent: String = "/tmp") throws {
        // Standardised, so that a parent ending in '/' (NSTemporaryDirectory() does) gives the
        // path zonefeed itself prints, without a doubled slash.
        directory = URL(fileURLWithPath: parent).appendingPathComponent("zf-e2e-\(UUID().uuidString.prefix(8))").standardizedFileURL
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        self.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
    }

    /// A started process; `wait()` collects its output.
    public final class Running: Sendable {
        let process: ChildProcess
        let out: URL, err: URL
        init(process: ChildProcess, out: URL, err: URL) {
            self.process = process
            self.out = out
            self.err = err
        }

        public var pid: Int32 { process.pid }
        public var isRunning: Bool { process.isRunning }
        public func signal(_ sig: Int32) { process.signal(sig) }
        /// What the process has written to stdout so far.
        public var stdoutSoFar: String { (try? String(contentsOf: out, encoding: .utf8)) ?? "" }
        /// What the process has written to stderr so far.
        public var stderrSoFar: String { (try? String(contentsOf: err, encoding: .utf8)) ?? "" }

        /// Sends `sig` (SIGTERM unless told) unless the process has ended, then waits for it.
        @discardableResult
        public func stop(_ sig: Int32 = SIGTERM) async -> Output {
            end(sig)
            return await wait()
        }

        /// SIGKILL after `delay` (the random moment a crash test picks, not a wait for a condition),
        /// timed on a thread of its own: the moment waits neither for the
        /// cooperative pool nor for Dispatch's global queues, whose few threads the tests'
        /// blocking libpq calls may all hold on a loaded machine.
        public func kill(after delay: Duration) {
            Thread.detachNewThread { [self] in kill(blockingFor: delay) }
        }

        /// Sleeps `delay` on the calling thread (never a cooperative one), then sends SIGKILL
        /// unless the process has ended.
        func kill(blockingFor delay: Duration) {
            let (seconds, attoseconds) = delay.components
            Thread.sleep(forTimeInterval: Double(seconds) + Double(attoseconds) / 1e18)
            end(SIGKILL)
        }

        /// Sends `sig` (SIGTERM unless told) unless the process has ended, without waiting: for a
        /// `defer`, which cannot wait.
        public func end(_ sig: Int32 = SIGTERM) {
            process.signal(sig)
        }

        /// Waits at most `limit`; a process still running then is killed (SIGKILL) and its
        /// output returned with `timedOut` set, so that a test of a bound fails instead of hanging.
        public func wait(within limit: Duration) async -> (output: Output, timedOut: Bool) {
            let deadline = ContinuousClock.now + limit
            while process.isRunning, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(20)) }
            let timedOut = process.isRunning
            if timedOut { signal(SIGKILL) }
            return (await wait(), timedOut)
        }

        /// Waits for the process to end, suspended: the tests share the cooperative pool (as many
        /// threads as cores) with the servers they start in process, and a test blocked on a
        /// child that needs such a server would starve it.
        public func wait() async -> Output {
            let status: Int32
            do { status = try await process.wait() } catch { status = -1 }
            return Output(
                status: status,
                stdout: (try? String(contentsOf: out, encoding: .utf8)) ?? "",
                stderr: (try? String(contentsOf: err, encoding: .utf8)) ?? "")
        }
    }

    /// Starts the binary with `arguments` and returns once it runs; its standard input is
    /// `input` when given (the test writes to it and closes it), else empty.
    public func start(_ arguments: [String], executable: String = ZonefeedBinary.path, input: Pipe? = nil) async throws -> Running {
        let id = UUID().uuidString.prefix(8)
        let out = directory.appendingPathComponent("out-\(id).txt")
        let err = directory.appendingPathComponent("err-\(id).txt")
        let descriptors = try ChildProcess.Descriptors(stdout: out.path, stderr: err.path, stdin: input?.fileHandleForReading.fileDescriptor)
        defer { descriptors.close() }
        let process = try await ChildProcess(
            executable: executable, arguments: arguments, environment: environment, workingDirectory: directory.path,
            descriptors: descriptors)
        return Running(process: process, out: out, err: err)
    }

    public func run(_ arguments: [String]) async throws -> Output {
        try await start(arguments).wait()
    }

    /// A command line run by /bin/sh in the working directory, as a user pastes it.
    public func shell(_ commandLine: String) async throws -> Output {
        try await start(["-c", commandLine], executable: "/bin/sh").wait()
    }

    public func remove() { try? FileManager.default.removeItem(at: directory) }
}
