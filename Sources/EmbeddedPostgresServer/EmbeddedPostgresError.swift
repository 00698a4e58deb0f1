/// Something went wrong with the embedded server; `description` says what to do next.
public struct EmbeddedPostgresError: Error, CustomStringConvertible {
    /// A struct rather than an enum, so that a new code breaks no caller's switch.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        public let description: String
        private init(_ description: String) { self.description = description }

        public static let binariesNotFound = Code("binariesNotFound")
        public static let versionMismatch = Code("versionMismatch")
        public static let badDirectory = Code("badDirectory")
        public static let directoryUnreachable = Code("directoryUnreachable")
        public static let noUnprivilegedAccount = Code("noUnprivilegedAccount")
        public static let commandFailed = Code("commandFailed")
        public static let initdbFailed = Code("initdbFailed")
        public static let startFailed = Code("startFailed")
        public static let createDatabaseFailed = Code("createDatabaseFailed")
        public static let stopFailed = Code("stopFailed")
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
