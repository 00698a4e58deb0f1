import EmbeddedPostgresServer
import Logging

/// The destination opens itself for one command: a connection string for the database the
/// settings name, or for `embedded`, the private cluster under `.zonefeed/postgres`, started
/// (or reused) before the command and stopped after it on every path.
extension PostgresSettings {
    /// Runs `body` with a libpq connection string for this destination. A cluster that cannot
    /// be started throws `EmbeddedPostgresError`; the body's own failures are other errors.
    public func withConninfo<T>(logger: Logger, _ body: (String) async throws -> T) async throws -> T {
        guard isEmbedded else { return try await body(url.value) }
        return try await Self.embeddedServer(logger: logger).withServer { handle in try await body(handle.connectionString) }
    }

    /// The cluster of `destination.url: embedded`, asked for under `.zonefeed/postgres`.
    public static func embeddedServer(logger: Logger) -> EmbeddedPostgres {
        EmbeddedPostgres(EmbeddedPostgres.Configuration(directory: ".zonefeed/postgres"), logger: logger)
    }
}
