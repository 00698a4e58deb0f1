import Logging
import NIOHTTP1

// The endpoints a change feed needs (reference §2). Each takes an optional `logger:`; without one
// the client's logger is used.
extension CloudKitClient {
    /// `POST records/changes`: one page of a custom zone's changes after `syncToken` (nil: from
    /// the beginning, and the key is left out).
    ///
    /// - Parameters:
    ///   - resultsLimit: 1...200; nil lets the server use its maximum.
    ///   - desiredKeys: only these fields; nil fetches every field.
    public func fetchRecordZoneChanges(
        zoneID: ZoneID, syncToken: String?, resultsLimit: Int? = nil, desiredKeys: [String]? = nil,
        logger: Logger? = nil
    ) async throws -> RecordZoneChangesResponse {
        var logger = logger ?? self.logger
        logger[metadataKey: "zone"] = "\(zoneID.zoneName)"
        return try await send(
            RecordZoneChangesResponse.self, operation: "records/changes", method: .POST,
            body: Self.recordZoneChangesBody(zoneID: zoneID, syncToken: syncToken, resultsLimit: resultsLimit, desiredKeys: desiredKeys),
            logger: logger)
    }

    static func recordZoneChangesBody(zoneID: ZoneID, syncToken: String?, resultsLimit: Int?, desiredKeys: [String]?) -> JSONValue {
        var body: [String: JSONValue] = ["zoneID": Self.requestJSON(zoneID)]
        if let syncToken { body["syncToken"] = .string(syncToken) }
        if let resultsLimit { body["resultsLimit"] = .int(Int64(resultsLimit)) }
        if let desiredKeys { body["desiredKeys"] = .array(desiredKeys.map { .string($0) }) }
        return .object(body)
    }

    /// `POST changes/database`: one page of the zones that changed or went away after
    /// `syncToken` (a database token, never a zone token).
    public func fetchDatabaseChanges(syncToken: String?, resultsLimit: Int? = nil, logger: Logger? = nil) async throws -> DatabaseChangesResponse {
        var body: [String: JSONValue] = [:]
        if let syncToken { body["syncToken"] = .string(syncToken) }
        if let resultsLimit { body["resultsLimit"] = .int(Int64(resultsLimit)) }
        return try await send(
            DatabaseChangesResponse.self, operation: "changes/database", method: .POST, body: .object(body), logger: logger)
    }

    /// `POST records/query`: one page of the records of `recordType` in `zoneID` (the
    /// `_defaultZone` unless told), those `filters` keep, in `sort` order of modification time
    /// (nil: the server's order), after `continuationMarker` (nil: the first page). The way to
    /// read the public database, which has no change feed.
    ///
    /// - Parameters:
    ///   - resultsLimit: 1...200; nil lets the server use its maximum.
    ///   - desiredKeys: only these fields (`[]`: none, names and system fields only); nil fetches
    ///     every field.
    public func queryRecords(
        recordType: String, zoneID: ZoneID? = nil, filters: [ModificationFilter] = [], sort: ModificationSort? = .ascending,
        continuationMarker: String? = nil, resultsLimit: Int? = nil, desiredKeys: [String]? = nil, logger: Logger? = nil
    ) async throws -> RecordQueryResponse {
        var logger = logger ?? self.logger
        logger[metadataKey: "recordType"] = "\(recordType)"
        return try await send(
            RecordQueryResponse.self, operation: "records/query", method: .POST,
            body: Self.queryBody(
                recordType: recordType, zoneID: zoneID, filters: filters, sort: sort,
                continuationMarker: continuationMarker, resultsLimit: resultsLimit, desiredKeys: desiredKeys),
            logger: logger)
    }

    static func queryBody(
        recordType: String, zoneID: ZoneID?, filters: [ModificationFilter], sort: ModificationSort?, continuationMarker: String?,
        resultsLimit: Int?, desiredKeys: [String]?
    ) -> JSONValue {
        var query: [String: JSONValue] = ["recordType": .string(recordType)]
        if !filters.isEmpty {
            query["filterBy"] = .array(
                filters.map { filter in
                    .object([
                        "systemFieldName": .string("modifiedTimestamp"), "comparator": .string(filter.comparator.rawValue),
                        "fieldValue": .object(["value": .int(filter.milliseconds), "type": .string("TIMESTAMP")]),
                    ])
                })
        }
        if let sort {
            query["sortBy"] = .array([.object(["systemFieldName": .string("modifiedTimestamp"), "ascending": .bool(sort == .ascending)])])
        }
        var body: [String: JSONValue] = ["query": .object(query)]
        if let zoneID { body["zoneID"] = Self.requestJSON(zoneID) }
        if let continuationMarker { body["continuationMarker"] = .string(continuationMarker) }
        if let resultsLimit { body["resultsLimit"] = .int(Int64(resultsLimit)) }
        if let desiredKeys { body["desiredKeys"] = .array(desiredKeys.map { .string($0) }) }
        return .object(body)
    }

    /// `POST records/lookup`: the records named, in `zoneID` (the `_defaultZone` unless told), in
    /// the order asked; one that is not there is an error entry of its own (`NOT_FOUND`). Its
    /// answer has a query's shape without a marker. A lookup reads the records, not a query
    /// index: it finds a record a query does not see yet.
    ///
    /// - Parameters:
    ///   - recordNames: 1...200 names.
    ///   - desiredKeys: only these fields; nil fetches every field.
    public func lookUpRecords(
        _ recordNames: [String], zoneID: ZoneID? = nil, desiredKeys: [String]? = nil, logger: Logger? = nil
    ) async throws -> RecordQueryResponse {
        var body: [String: JSONValue] = ["records": .array(recordNames.map { .object(["recordName": .string($0)]) })]
        if let zoneID { body["zoneID"] = Self.requestJSON(zoneID) }
        if let desiredKeys { body["desiredKeys"] = .array(desiredKeys.map { .string($0) }) }
        return try await send(RecordQueryResponse.self, operation: "records/lookup", method: .POST, body: .object(body), logger: logger)
    }

    /// `GET zones/list`: every zone of the database with its current sync token. Zone error
    /// entries are logged and left out.
    public func listZones(logger: Logger? = nil) async throws -> [ZoneInfo] {
        let response = try await send(ZoneListResponse.self, operation: "zones/list", method: .GET, body: nil, logger: logger)
        for error in response.errors {
            (logger ?? self.logger).warning(
                "zones/list returned a zone error entry",
                metadata: ["code": "\(error.serverErrorCode ?? "?")", "reason": "\(error.reason ?? "")"])
        }
        return response.zones
    }

    /// `GET …/public/users/caller`: who the credentials belong to.
    public func caller(logger: Logger? = nil) async throws -> UserIdentity {
        try await send(CallerResponse.self, operation: "users/caller", method: .GET, scope: .publicDatabase, body: nil, logger: logger).user
    }

    /// A zone ID as a request sends it. `__defaultOwner__` is a native placeholder for "the
    /// caller"; over REST the owner is left out, which the reference says means the caller.
    static func requestJSON(_ zoneID: ZoneID) -> JSONValue {
        var o: [String: JSONValue] = ["zoneName": .string(zoneID.zoneName)]
        if zoneID.ownerRecordName != ZoneID.defaultOwner { o["ownerRecordName"] = .string(zoneID.ownerRecordName) }
        return .object(o)
    }
}
