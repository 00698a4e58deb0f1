import Foundation
import LibPQ
import Logging
import ZoneFeed

/// The PostgreSQL destination opened for one command: a connection string (the embedded
/// cluster's while it runs), from which each run makes a `PostgresDestination` of its own, and
/// the pipeline's row of `zonefeed_web_auth_tokens` as the source's vault.
struct PostgresOpenedDestination: OpenedDestination {
    let pipelineName: String
    let settings: PostgresSettings
    let conninfo: String
    let vault: WebAuthTokenTable
    /// The command's logger, for the destinations of `status` and `reset`.
    let logger: Logger

    init(pipelineName: String, settings: PostgresSettings, conninfo: String, logger: Logger) {
        self.pipelineName = pipelineName
        self.settings = settings
        self.conninfo = conninfo
        self.logger = logger
        vault = WebAuthTokenTable(pipelineName: pipelineName, schema: settings.schema, conninfo: conninfo)
    }

    var sourceVault: (any SourceVault)? { vault }

    func runDestination(logger: Logger) -> any RunDestination {
        PostgresDestination(pipelineName: pipelineName, settings: settings, conninfo: conninfo, logger: logger)
    }

    /// Connects without creating anything: before the first run there is nothing to show.
    func status() async throws -> PipelineStatus {
        var status = try await withDestination { destination in
            try await destination.connect()
            return try await destination.status()
        }
        status.notes = settings.embeddedNotes(logger: logger)
        return status
    }

    func reset(zoneNames: [String], all: Bool, addingUnknownZones: Bool) async throws -> ResetOutcome {
        try await withDestination { destination in
            try await destination.prepare()
            return try await destination.reset(zoneNames: zoneNames, all: all, addingUnknownZones: addingUnknownZones)
        }
    }

    /// A destination for `body`, closed after it on every path.
    private func withDestination<T: Sendable>(_ body: (PostgresDestination) async throws -> T) async throws -> T {
        let destination = PostgresDestination(pipelineName: pipelineName, settings: settings, conninfo: conninfo, logger: logger)
        do {
            let value = try await body(destination)
            await destination.close()
            return value
        } catch {
            await destination.close()
            throw error
        }
    }

    /// An option as PGOPTIONS carries it: the server splits the variable at white space unless
    /// a backslash comes before it.
    /// > "Spaces within this string are considered to separate command-line arguments, unless
    /// > escaped with a backslash (\); write \\ to represent a literal backslash."
    static func optionEscaped(_ option: String) -> String {
        var out = ""
        for scalar in option.unicodeScalars {
            if scalar == "\\" || (scalar.isASCII && scalar.properties.isWhitespace) { out.unicodeScalars.append("\\") }
            out.unicodeScalars.append(scalar)
        }
        return out
    }

    /// psql on the pipeline's schema. Its arguments are anyone's to read (`ps`), so the password
    /// is not among them: psql reads it from a password file of this user's own, removed when
    /// `body` returns.
    func withShell<T: Sendable>(arguments: [String], _ body: (DestinationShell) async throws -> T) async throws -> T? {
        guard let connection = PasswordlessConninfo(conninfo) else {
            throw PsqlError(
                .unparsableConnectionString,
                "libpq cannot parse the destination's connection string; check its syntax (it is not shown, as it may hold a password)")
        }
        var environment: [String: String?] = ["PGOPTIONS": "-c " + Self.optionEscaped("search_path=\(quoteIdentifier(settings.schema)),public")]
        Self.removeFilesLeftByEndedProcesses()
        var passwordFile: String?
        var serviceFile: String?
        defer {
            if let passwordFile { unlink(passwordFile) }
            if let serviceFile { unlink(serviceFile) }
        }
        if let text = connection.serviceFile {
            // The client key's passphrase, which no environment variable carries.
            serviceFile = try Self.writePrivateFile(text, kind: "pgservice")
            environment["PGSERVICEFILE"] = serviceFile
        }
        if let password = connection.password {
            // > "PGPASSWORD behaves the same as the password connection parameter."
            // It would win over the file, and one inherited from the shell is not this pipeline's.
            environment.updateValue(nil, forKey: "PGPASSWORD")
            if let line = connection.passwordFileLine {
                passwordFile = try Self.writePrivateFile(line, kind: "pgpass")
                environment["PGPASSFILE"] = passwordFile
            } else {
                // A line break cannot be written in a password file; the environment of a
                // process is readable by its own user only (and root), unlike its arguments.
                environment["PGPASSWORD"] = password
            }
        }
        let shell = DestinationShell(
            program: "psql", arguments: ["--no-psqlrc", "-d", connection.conninfo] + arguments, environment: environment,
            installAdvice: "install the postgresql-client package")
        return try await body(shell)
    }

    /// The folder the files for psql go in.
    static var temporaryFolder: String { ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp" }

    /// Removes this user's password and service files (`zonefeed-pgpass-PID-…`,
    /// `zonefeed-pgservice-PID-…`) whose process has ended: one killed while psql ran (SIGKILL,
    /// the OOM killer) could not remove its own, and left the password in a file for good.
    static func removeFilesLeftByEndedProcesses() {
        let folder = temporaryFolder
        let dayAgo = Int(Date().timeIntervalSince1970) - 86_400
        for name in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] {
            guard let kind = ["zonefeed-pgpass-", "zonefeed-pgservice-"].first(where: { name.hasPrefix($0) }) else { continue }
            var status = stat()
            let path = folder + "/" + name
            guard lstat(path, &status) == 0, status.st_uid == geteuid(), (status.st_mode & S_IFMT) == S_IFREG else { continue }
            let rest = name.dropFirst(kind.count)
            if let pid = Int32(rest.prefix { $0 != "-" }), rest.contains("-") {
                guard pid > 0, kill(pid, 0) != 0, errno == ESRCH else { continue }
            } else {
                // Named by an older release, without the process's ID: removed once a day old,
                // when no psql session it served can still need it.
                guard Int(status.st_mtim.tv_sec) < dayAgo else { continue }
            }
            unlink(path)
        }
    }

    /// A new file of mode 0600 in the temporary folder holding `text` (a password file's line
    /// for `PGPASSFILE`, a service file for `PGSERVICEFILE`), named with this process's ID
    /// (`removeFilesLeftByEndedProcesses`); its path.
    static func writePrivateFile(_ text: String, kind: String) throws(PsqlError) -> String {
        let parent = temporaryFolder
        func failure() -> PsqlError {
            PsqlError(
                .passwordFileNotWritten,
                "could not write a private password file for psql in \(parent) (\(String(cString: strerror(errno)))): "
                    + "set TMPDIR to a folder this user can write")
        }
        // > mkstemp: "The file is created with permissions 0600, that is, read plus write for
        // > owner only." libpq ignores a password file that group or others may read.
        var template = Array("\(parent)/zonefeed-\(kind)-\(getpid())-XXXXXX".utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else { throw failure() }
        let path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        defer { close(fd) }
        var bytes = Array(text.utf8)[...]
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
}

/// Why psql could not be made ready for `zonefeed psql`.
public struct PsqlError: Error, Sendable, CustomStringConvertible {
    /// A struct rather than an enum, so that a new code breaks no caller's switch.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        public let description: String
        private init(_ description: String) { self.description = description }

        /// libpq cannot parse the connection string, so its password cannot be taken out.
        public static let unparsableConnectionString = Code("unparsableConnectionString")
        /// The private password file could not be written.
        public static let passwordFileNotWritten = Code("passwordFileNotWritten")
    }

    public var code: Code
    public var description: String

    public init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }
}
