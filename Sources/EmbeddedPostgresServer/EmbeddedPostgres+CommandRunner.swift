import Foundation
import Logging
import Subprocess
import SystemPackage

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

extension EmbeddedPostgres {
    /// Runs a server program through swift-subprocess: as the server's account when this process
    /// is root (through runuser), with an allowlisted environment (`childEnvironment()`) and
    /// messages in English (LC_ALL=C). The child gets stdin, stdout and stderr and nothing else,
    /// default signal handling and an empty signal mask (what this process traps is not the
    /// server's business).
    ///
    /// The output goes to an unlinked temporary file rather than a pipe: `pg_ctl start` leaves a
    /// postmaster behind, and a pipe's end of file would wait for every process that might hold
    /// it; the file is read once the command has exited.
    struct CommandRunner {
        var account: Account?
        var workingDirectory: String
        var logger: Logger

        struct Result {
            var status: Int32
            var output: String
        }

        func run(_ executable: String, _ arguments: [String], input: String? = nil) async throws -> Result {
            var launchPath = executable
            var launchArguments = arguments
            if let account {
                // PostgreSQL refuses to run as root: its programs run as the account. Through
                // runuser rather than swift-subprocess's userID and supplementaryGroups: those make
                // it fork and call glibc's setgroups() in the child, which waits forever for the
                // parent's other threads (swift-subprocess 1.0.2, seen here as a hung `zonefeed run`).
                launchPath = try runuserPath(for: account)
                launchArguments = ["-u", account.name, "--", executable] + arguments
            }
            logger.debug("running", metadata: ["command": "\(([launchPath] + launchArguments).joined(separator: " "))"])
            let output = try anonymousFile(contents: nil)
            defer { _ = close(output) }
            let stdin = try input.map { try anonymousFile(contents: $0) } ?? open("/dev/null", O_RDONLY | O_CLOEXEC)
            defer { _ = close(stdin) }
            let result: ExecutionResult<Void, FileDescriptorOutput, FileDescriptorOutput>
            do {
                result = try await Subprocess.run(
                    .path(FilePath(launchPath)), arguments: Arguments(launchArguments),
                    // Keys and values, not raw "K=V" byte rows: swift-subprocess passes each raw
                    // row to strdup, which reads past a row without a NUL of its own.
                    environment: .custom(Dictionary(uniqueKeysWithValues: childEnvironment().map { (Environment.Key(stringLiteral: $0.key), $0.value) })),
                    workingDirectory: FilePath(workingDirectory),
                    input: .fileDescriptor(FileDescriptor(rawValue: stdin), closeAfterSpawningProcess: false),
                    output: .fileDescriptor(FileDescriptor(rawValue: output), closeAfterSpawningProcess: false),
                    error: .fileDescriptor(FileDescriptor(rawValue: output), closeAfterSpawningProcess: false))
            } catch {
                throw EmbeddedPostgresError(
                    .commandFailed, "could not run \(launchPath) (\(error)): check the PostgreSQL installation")
            }
            let status: Int32
            switch result.terminationStatus {
            case .exited(let code): status = code
            case .signaled(let signal): status = 128 + signal  // as shells report it
            }
            return Result(status: status, output: readAll(output))
        }

        private func runuserPath(for account: Account) throws -> String {
            let candidates = ["/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser", "/bin/runuser"]
            if let found = candidates.first(where: FileManager.default.isExecutableFile(atPath:)) ?? searchPath(for: "runuser") {
                return found
            }
            throw EmbeddedPostgresError(
                .commandFailed,
                "PostgreSQL refuses to run as root and runuser (util-linux) was not found to run it as "
                    + "'\(account.name)': install util-linux, or run zonefeed as a regular user"
            )
        }
    }
}

/// The environment of the programs the embedded server runs: this process's variables that
/// `isPassedToServerPrograms` allows, and LC_ALL=C.
func childEnvironment() -> [String: String] {
    var environment = ProcessInfo.processInfo.environment.filter { isPassedToServerPrograms($0.key) }
    // Messages in English: the code reads pg_ctl's output (`--version`), and people read the rest.
    environment["LC_ALL"] = "C"
    return environment
}

/// An allowlist, not this process's environment less a few names: the postmaster outlives the
/// command that starts it, and any process of its account (as root, the server account's) can
/// read its environment in /proc/<pid>/environ, so it must carry none of the secrets this process
/// was given (CLOUDKIT_API_TOKEN, CLOUDKIT_WEB_AUTH_TOKEN, DATABASE_URL…). The programs need PATH
/// to find one another, LANG, LC_* and TZ for their messages and times, and TMPDIR for temporary
/// files; no PG* variable passes, since the commands get every setting explicitly.
func isPassedToServerPrograms(_ name: String) -> Bool {
    ["PATH", "LANG", "TZ", "TMPDIR"].contains(name) || name.hasPrefix("LC_")
}

/// A temporary file that is already unlinked, holding `contents`, positioned at its start.
private func anonymousFile(contents: String?) throws -> Int32 {
    let folder = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
    var template = Array("\(folder)/zonefeed-XXXXXX".utf8CString)
    let descriptor = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
    guard descriptor >= 0 else {
        throw EmbeddedPostgresError(
            .commandFailed, "could not create a temporary file in \(folder) (\(String(cString: strerror(errno)))): check TMPDIR"
        )
    }
    _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
    template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
    if let contents {
        let bytes = Array(contents.utf8)
        var written = 0
        while written < bytes.count {
            let result = bytes[written...].withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if result < 0 && errno == EINTR { continue }
            guard result > 0 else { break }
            written += result
        }
        _ = lseek(descriptor, 0, SEEK_SET)
    }
    return descriptor
}

private func readAll(_ descriptor: Int32) -> String {
    _ = lseek(descriptor, 0, SEEK_SET)
    var data = [UInt8]()
    var buffer = [UInt8](repeating: 0, count: 16 * 1024)
    while true {
        let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        if count < 0 && errno == EINTR { continue }
        guard count > 0 else { break }
        data.append(contentsOf: buffer[0..<count])
    }
    return String(decoding: data, as: UTF8.self)
}
