/// Something went wrong with the embedded server; `description` says what to do next.
public struct EmbeddedPostgresError: Error, CustomStringConvertible {
    public enum Code: String, Sendable {
        case binariesNotFound
        case versionMismatch
        case badDirectory
        case directoryUnreachable
        case socketPathTooLong
        case noUnprivilegedAccount
        case commandFailed
        case initdbFailed
        case startFailed
        case createDatabaseFailed
        case stopFailed
    }

    public let code: Code
    public let message: String
    /// The last lines of server.log, when the server was involved.
    public let serverLogTail: String?

    init(_ code: Code, _ message: String, serverLogTail: String? = nil) {
        self.code = code
        self.message = message
        self.serverLogTail = serverLogTail
    }

    public var description: String {
        guard let serverLogTail, !serverLogTail.isEmpty else { return message }
        return message + "\n--- last lines of the server log ---\n" + serverLogTail
    }
}
