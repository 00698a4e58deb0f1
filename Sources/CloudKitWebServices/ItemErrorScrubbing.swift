import CloudKitModel

/// A response whose entries carry the server's own words: a record's or a zone's error entry
/// (`serverErrorCode`, `reason`, `uuid`). They are quoted in logs, in a zone's `last_error` and
/// in rejects, so they are scrubbed of the request's secrets as a failed request's error body
/// is: a proxy or a server that echoes the request's tokens must not put them there.
protocol ItemErrorScrubbing {
    mutating func scrubItemErrors(_ scrub: (String) -> String)
}

extension RecordError {
    mutating func scrub(_ scrub: (String) -> String) {
        serverErrorCode = scrub(serverErrorCode)
        reason = reason.map(scrub)
        uuid = uuid.map(scrub)
    }
}

extension Array where Element == RecordEntry {
    /// Only a page with an error entry is written to (most have none, and are not copied).
    mutating func scrubItemErrors(_ scrub: (String) -> String) {
        for i in indices {
            guard case .error(var error) = self[i] else { continue }
            error.scrub(scrub)
            self[i] = .error(error)
        }
    }
}

extension RecordZoneChangesResponse: ItemErrorScrubbing {
    mutating func scrubItemErrors(_ scrub: (String) -> String) { records.scrubItemErrors(scrub) }
}

extension RecordQueryResponse: ItemErrorScrubbing {
    mutating func scrubItemErrors(_ scrub: (String) -> String) { records.scrubItemErrors(scrub) }
}

extension DatabaseChangesResponse: ItemErrorScrubbing {
    mutating func scrubItemErrors(_ scrub: (String) -> String) {
        for i in zones.indices where zones[i].serverErrorCode != nil || zones[i].reason != nil {
            zones[i].serverErrorCode = zones[i].serverErrorCode.map(scrub)
            zones[i].reason = zones[i].reason.map(scrub)
        }
    }
}

extension SubscriptionsResponse: ItemErrorScrubbing {
    mutating func scrubItemErrors(_ scrub: (String) -> String) {
        for i in subscriptions.indices where subscriptions[i].serverErrorCode != nil || subscriptions[i].reason != nil {
            subscriptions[i].serverErrorCode = subscriptions[i].serverErrorCode.map(scrub)
            subscriptions[i].reason = subscriptions[i].reason.map(scrub)
        }
    }
}

extension ZoneListResponse: ItemErrorScrubbing {
    mutating func scrubItemErrors(_ scrub: (String) -> String) {
        for i in errors.indices {
            errors[i].serverErrorCode = errors[i].serverErrorCode.map(scrub)
            errors[i].reason = errors[i].reason.map(scrub)
            errors[i].uuid = errors[i].uuid.map(scrub)
        }
    }
}
