import CloudKitWebServices
import ZoneFeed

/// The page requested ahead of the engine for each zone being read: which token it answers, and
/// the request.
actor PageReadAhead {
    private var pending: [ZoneID: (token: String, task: Task<UndecodedRecordZoneChanges, any Error>)] = [:]

    /// The request for `token` of `zone`, if it is the one read ahead; another one for the zone
    /// is cancelled, as the engine went another way.
    func take(zone: ZoneID, token: String?) -> Task<UndecodedRecordZoneChanges, any Error>? {
        guard let ahead = pending.removeValue(forKey: zone) else { return nil }
        if ahead.token == token { return ahead.task }
        ahead.task.cancel()
        return nil
    }

    /// Cancels the zone's request read ahead, if any.
    func drop(zone: ZoneID) {
        pending.removeValue(forKey: zone)?.task.cancel()
    }

    func start(zone: ZoneID, token: String, _ task: Task<UndecodedRecordZoneChanges, any Error>) {
        pending[zone]?.task.cancel()
        pending[zone] = (token, task)
    }

    /// Cancels every request read ahead and waits for them to end.
    func cancel() async {
        let tasks = pending.values.map(\.task)
        pending.removeAll()
        for task in tasks {
            task.cancel()
            _ = try? await task.value
        }
    }
}
