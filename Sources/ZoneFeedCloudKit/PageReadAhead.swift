import CloudKitWebServices
import ZoneFeed

/// The one page requested ahead of the engine: which zone and token it answers, and the request.
actor PageReadAhead {
    private var pending: (zone: ZoneID, token: String, task: Task<UndecodedRecordZoneChanges, any Error>)?

    /// The request for `token` of `zone`, if it is the one read ahead; any other is cancelled,
    /// as the engine went another way.
    func take(zone: ZoneID, token: String?) -> Task<UndecodedRecordZoneChanges, any Error>? {
        guard let pending else { return nil }
        self.pending = nil
        if pending.zone == zone, pending.token == token { return pending.task }
        pending.task.cancel()
        return nil
    }

    func start(zone: ZoneID, token: String, _ task: Task<UndecodedRecordZoneChanges, any Error>) {
        pending?.task.cancel()
        pending = (zone, token, task)
    }

    /// Cancels the request read ahead and waits for it to end.
    func cancel() async {
        guard let pending else { return }
        self.pending = nil
        pending.task.cancel()
        _ = try? await pending.task.value
    }
}
