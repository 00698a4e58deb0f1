import EmbeddedPostgresServer
import Logging
import ZoneFeed

/// The destination opens itself for one command: a connection string for the database the
/// settings name, or for `embedded`, the private cluster under `.zonefeed/postgres`, started
/// (or reused) before the command and stopped after it on every path.
extension PostgresSettings {
    public func open<T>(pipelineName: String, logger: Logger, _ body: (any OpenedDestination) async throws -> T) async throws -> T {
        try await withConninfo(logger: logger) { conninfo in
            let opened = PostgresOpenedDestination(pipelineName: pipelineName, settings: self, conninfo: conninfo, logger: logger)
            // The vault is closed last: the source's shutdown, within the body, saves to it.
            defer { opened.vault.close() }
            return try await body(opened)
        }
    }

    /// Runs `body` with a libpq connection string for this destination. A cluster that cannot
    /// be started throws `DestinationUnavailableError`; the body's own errors pass through.
    public func withConninfo<T>(logger: Logger, _ body: (String) async throws -> T) async throws -> T {
        guard isEmbedded else { return try await body(url.value) }
        do {
            return try await Self.embeddedServer(logger: logger).withServer { handle in
                do { return try await body(handle.connectionString) } catch { throw BodyFailure(error: error) }
            }
        } catch let failure as BodyFailure {
            throw failure.error
        } catch let error as EmbeddedPostgresError {
            throw DestinationUnavailableError(.serverDidNotStart, "\(error)")
        }
    }

    /// The cluster of `destination.url: embedded`, asked for under `.zonefeed/postgres`.
    public static func embeddedServer(logger: Logger) -> EmbeddedPostgres {
        EmbeddedPostgres(EmbeddedPostgres.Configuration(directory: ".zonefeed/postgres"), logger: logger)
    }

    /// What `zonefeed status` says of an embedded cluster: where it is, and how to remove it.
    func embeddedNotes(logger: Logger) -> [String] {
        guard isEmbedded else { return [] }
        let cluster = Self.embeddedServer(logger: logger)
        var notes = ["embedded PostgreSQL cluster: \(cluster.configuration.directory)"]
        if cluster.isRelocated {
            notes.append("  (PostgreSQL's account cannot reach \(cluster.requestedDirectory), the folder asked for)")
        }
        notes.append("  to remove it, with no zonefeed command using it: \(cluster.removalCommand)")
        return notes
    }
}

/// The body's error, carried through the embedded server's scope untouched: only the server's
/// own failures are the destination's.
private struct BodyFailure: Error {
    var error: any Error
}
