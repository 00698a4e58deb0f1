import CloudKitModel
import Logging

/// A zone's batches on their way into the destination, oldest first: the one being applied and,
/// when the destination has a connection to spare, the next one applied alongside it. A zone's
/// batches are otherwise written one after another on one connection, so a backfill of a single
/// zone (or the last zone of a run) would keep one PostgreSQL session busy of the two or more
/// the destination has.
///
/// A batch applied alongside `follows` the one before it: the destination commits it only after
/// that one committed, and only if the zone's token is then that one's, so the order of commits
/// is the feed's whatever the connections do, and a crash can leave only a prefix of the feed
/// applied. When it cannot commit (the batch before it had not begun, or failed, or the two met
/// in a deadlock), it is applied again on its own once the batch before it has committed; after
/// `failuresBeforeGivingUp` such batches (a spare connection that cannot connect, say), the zone
/// writes one batch at a time again.
///
/// A zone then holds up to two batches being written, one being read and what is read ahead.
struct BatchesInFlight {
    private struct Applying {
        var batch: ChangeBatch
        /// The spare connection it is applied on; nil for the zone's own.
        var spare: SpareConnection?
        var task: Task<BatchOutcome, any Error>
    }

    let destination: any BatchSink
    let logger: Logger
    private var applying: [Applying] = []
    /// Batches written alongside that did not commit.
    private var failures = 0
    static let failuresBeforeGivingUp = 3
    /// Batches that ended and were not yet handed back: kept when a later one fails, so that
    /// what committed is still counted.
    private var ended: [(ChangeBatch, BatchOutcome)] = []

    init(destination: any BatchSink, logger: Logger) {
        self.destination = destination
        self.logger = logger
    }

    /// Starts applying `batch`, which moves the zone's token from `batch.from`; returns the batches
    /// that had to end first, oldest first, with what they applied. A batch that cannot be
    /// followed (one that sweeps or ends a resync) is applied here, after every batch before it.
    /// Once the run is cancelled, no batch is started.
    mutating func start(_ batch: ChangeBatch) async throws -> [(ChangeBatch, BatchOutcome)] {
        try Task.checkCancellation()
        if applying.count == 2 { try await endOldest() }
        let alone = !batch.listed.isEmpty || batch.finishesResync || failures >= Self.failuresBeforeGivingUp
        if !alone, let last = applying.last, Self.mayBeFollowed(last),
            let spare = destination.reserveSpareConnection(for: batch.zoneID, besides: last.spare)
        {
            var following = batch
            following.follows = BatchPosition(sequence: last.batch.sequence, token: last.batch.token)
            launch(following, on: spare)
            return takeEnded()
        }
        while !applying.isEmpty { try await endOldest() }
        if alone || !destination.hasSpareConnection(for: batch.zoneID) {
            // Nothing could go alongside it: applied before the next batch is read, as it
            // always was, so that a zone holds one batch at a time.
            ended.append((batch, try await destination.apply(batch)))
        } else {
            launch(batch, on: nil)
        }
        return takeEnded()
    }

    /// Starts applying `batch` on `spare`, or on the zone's own connection.
    private mutating func launch(_ batch: ChangeBatch, on spare: SpareConnection?) {
        let destination = self.destination
        let task = Task {
            if let spare { return try await destination.apply(batch, on: spare) }
            return try await destination.apply(batch)
        }
        applying.append(Applying(batch: batch, spare: spare, task: task))
    }

    /// Waits for every batch in flight, oldest first.
    mutating func endAll() async throws -> [(ChangeBatch, BatchOutcome)] {
        while !applying.isEmpty { try await endOldest() }
        return takeEnded()
    }

    /// After a failure: waits for every batch in flight (none is left running against the
    /// destination) and returns those that committed, oldest first; none is applied again.
    mutating func abandon() async -> [(ChangeBatch, BatchOutcome)] {
        await waitForTheRest()
        return takeEnded()
    }

    /// Waits for the batches in flight; those that committed (were one to have) are kept with
    /// the ended ones.
    private mutating func waitForTheRest() async {
        for entry in applying {
            if let outcome = try? await entry.task.value { ended.append((entry.batch, outcome)) }
        }
        applying = []
    }

    private mutating func takeEnded() -> [(ChangeBatch, BatchOutcome)] {
        defer { ended = [] }
        return ended
    }

    /// A batch may be followed only if it moves the token: a batch that follows commits when the
    /// zone's token is the one before it, which would also be true if that one had not committed.
    private static func mayBeFollowed(_ entry: Applying) -> Bool {
        entry.batch.from != entry.batch.token
    }

    private mutating func endOldest() async throws {
        let oldest = applying.removeFirst()
        do {
            do {
                ended.append((oldest.batch, try await oldest.task.value))
            } catch let error where oldest.batch.follows != nil && !Runner.isCancellation(error) {
                // The batch before it committed (it ended first), but this one did not commit
                // alongside it: it is applied again, still fenced by that batch's token, so
                // that were it to have committed after all, it is not applied twice.
                failures += 1
                logger.debug(
                    "a batch written alongside the one before it did not commit; applying it again",
                    metadata: ["zone": "\(oldest.batch.zoneID.zoneName)", "error": "\(error)"])
                if failures == Self.failuresBeforeGivingUp {
                    logger.notice(
                        "batches written alongside the ones before them did not commit \(failures) times; the zone's batches are written one at a time",
                        metadata: ["zone": "\(oldest.batch.zoneID.zoneName)", "error": "\(error)"])
                }
                ended.append((oldest.batch, try await destination.apply(oldest.batch)))
            }
        } catch {
            // The batches after it wait on it and cannot commit; none is left running.
            await waitForTheRest()
            throw error
        }
    }
}
