import ArgumentParser
import Foundation
import Subprocess
import ZoneFeed
import ZoneFeedComponents
import ZoneFeedPostgres

struct PsqlCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "psql",
        abstract: "Open psql on the pipeline's database (starting the embedded server if the pipeline uses it).",
        discussion: "Arguments after the pipeline file go to psql, e.g. zonefeed psql pipelines/demo.yml -c 'SELECT 1'.")

    @OptionGroup var options: PipelineOptions

    @Argument(parsing: .captureForPassthrough, help: "Arguments for psql.")
    var psqlArguments: [String] = []

    func run() async throws {
        let pipeline = try options.loadPipeline()
        let logger = options.makeLogger()
        let status = try await options.withDestination(pipeline, logger: logger) { conninfo -> Int32 in
            // psql's arguments are anyone's to read (`ps`), so the password is not among them:
            // psql reads it from a password file of this user's own, removed when psql ends.
            guard let connection = PasswordlessConninfo(conninfo) else {
                logger.error("libpq cannot parse the destination's connection string; check its syntax (it is not shown, as it may hold a password)")
                return 1
            }
            var environment: [Environment.Key: String?] = ["PGOPTIONS": "-c search_path=\(pipeline.postgres.schema),public"]
            var passwordFile: String?
            defer { if let passwordFile { unlink(passwordFile) } }
            if let password = connection.password {
                // > "PGPASSWORD behaves the same as the password connection parameter."
                // It would win over the file, and one inherited from the shell is not this pipeline's.
                environment.updateValue(nil, forKey: "PGPASSWORD")
                if let line = connection.passwordFileLine {
                    do {
                        passwordFile = try Self.writePasswordFile(line)
                    } catch {
                        logger.error("\(error)")
                        return 1
                    }
                    environment["PGPASSFILE"] = passwordFile
                } else {
                    // A line break cannot be written in a password file; the environment of a
                    // process is readable by its own user only (and root), unlike its arguments.
                    environment["PGPASSWORD"] = password
                }
            }
            // Ctrl-C belongs to psql (it cancels the query at hand); zonefeed waits for psql
            // rather than dying under it and leaving an embedded server running.
            let previous = signal(SIGINT, SIG_IGN)
            defer { signal(SIGINT, previous) }
            do {
                let result = try await Subprocess.run(
                    .name("psql"), arguments: Arguments(["--no-psqlrc", "-d", connection.conninfo] + psqlArguments),
                    environment: .inherit.updating(environment),
                    input: .currentStandardInput, output: .currentStandardOutput, error: .currentStandardError)
                switch result.terminationStatus {
                case .exited(let code): return code
                case .signaled(let signal): return 128 + signal
                }
            } catch {
                logger.error("could not start psql (install the postgresql-client package): \(error)")
                return 1
            }
        }
        if status != 0 { throw ExitCode(status) }
    }

    /// A new file of mode 0600 in the temporary folder holding `line`, for `PGPASSFILE`; its path.
    static func writePasswordFile(_ line: String) throws(PasswordFileError) -> String {
        let parent = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        func failure() -> PasswordFileError {
            PasswordFileError(
                description: "could not write a private password file for psql in \(parent) (\(String(cString: strerror(errno)))): "
                    + "set TMPDIR to a folder this user can write")
        }
        // > mkstemp: "The file is created with permissions 0600, that is, read plus write for
        // > owner only." libpq ignores a password file that group or others may read.
        var template = Array("\(parent)/zonefeed-pgpass-XXXXXX".utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else { throw failure() }
        let path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        defer { close(fd) }
        var bytes = Array(line.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                let error = failure()
                unlink(path)
                throw error
            }
            bytes = bytes.dropFirst(written)
        }
        return path
    }

    struct PasswordFileError: Error, CustomStringConvertible {
        var description: String
    }
}
