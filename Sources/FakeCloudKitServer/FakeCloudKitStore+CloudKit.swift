import CloudKitModel
import Foundation
import ServiceLifecycle

/// The CloudKit Web Services endpoints: `records/changes`, `changes/database`, `zones/list` and
/// `users/caller`, answered with the JSON shapes of the reference (`cloudkit-web-services.md`).
extension FakeCloudKitStore {
    struct ZoneIDBody: Decodable {
        var zoneName: String
        var ownerRecordName: String?
    }

    struct RecordsChangesBody: Decodable {
        var zoneID: ZoneIDBody?
        var syncToken: String?
        var resultsLimit: Int?
        var desiredKeys: [String]?
    }

    struct DatabaseChangesBody: Decodable {
        var syncToken: String?
        var resultsLimit: Int?
    }

    /// What the responder hands over for one CloudKit request.
    struct CloudKitRequest: Sendable {
        var method: String
        var path: String
        var apiToken: String?
        var webAuthToken: String?
        /// The server-to-server key's headers, when the request is signed.
        var signature: RequestSignature?
        var body: [UInt8]
        /// The host as the client reached this server: the courier URLs name it, with the
        /// courier's own port.
        var courierHost = "127.0.0.1"
        /// `scheme://host:port` as the client reached this server: the sign-in page's origin.
        var apiOrigin = "http://127.0.0.1"
    }

    /// What the responder sends back.
    struct CloudKitResponse: Sendable {
        var reply: Reply
        var rotatedToken: String?
        var delivery = Delivery.whole
        var delay: Duration = .zero
    }

    /// How the responder sends an answer's body.
    enum Delivery: Sendable {
        case whole
        /// The head promises the whole body; `bytes` of it (half when nil) are sent, then the
        /// connection is closed.
        case cutShort(bytes: Int?)
        /// The head at once, then a byte every `interval`.
        case trickle(interval: Duration)
    }

    /// One CloudKit request from its arrival to its response's departure, counted in flight all
    /// that time. Half the latency passes before the request is handled (it travels to the
    /// server) and half after (the answer travels back), so a token is issued halfway through
    /// the round trip, as a server far away issues it; an injected delay comes on top.
    nonisolated func handleInFlight(_ request: CloudKitRequest) async -> CloudKitResponse {
        let (tooMany, latency, afterThrottle, gate) = await arrive(webAuthToken: request.webAuthToken, path: request.path)
        // A cancelled sleep means the client has gone; the request is no longer in flight.
        if latency > .zero { try? await Task.sleep(for: latency / 2) }
        // A gate (`faults/gate`) ends at a graceful shutdown as a held answer does.
        if let gate { await cancelWhenGracefulShutdown { await self.wait(at: gate) } }
        let response = await handle(request, tooManyInFlight: tooMany)
        let rest = latency / 2 + response.delay
        // A held answer (`faults/hold`, up to ten minutes) ends at a graceful shutdown, which
        // otherwise would wait for it: a stopped server stops.
        if rest > .zero { _ = try? await cancelWhenGracefulShutdown { try await Task.sleep(for: rest) } }
        await depart(afterThrottle: afterThrottle, bodyBytes: response.reply.body.count)
        return response
    }

    /// Handles one request to `/database/1/…`, in this order: the path, authentication (and the
    /// next web auth token), too many requests in flight, injected delays and faults, then the
    /// endpoint itself. The request was counted in flight by `arrive()`, whose answer is
    /// `tooManyInFlight`.
    func handle(_ request: CloudKitRequest, tooManyInFlight: Bool = false) -> CloudKitResponse {
        requestsServed += 1
        let parts = request.path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        // `/database/1/{container}/{environment}/{database}/…`, or `/device/1/{container}/{environment}/tokens/…`.
        let isDevice = parts.first == "device"
        guard parts.count >= 6, parts[0] == "database" || isDevice, parts[1] == "1" else {
            return CloudKitResponse(reply: .error(404, "NOT_FOUND", "no such endpoint: \(request.path)"))
        }
        let (container, environment, database) = (parts[2], parts[3], isDevice ? "" : parts[4])
        let operation = parts[(isDevice ? 4 : 5)...].joined(separator: "/")

        let rotated: String?
        if let signed = request.signature {
            // A server-to-server key: no user, so no web auth token to rotate.
            guard request.webAuthToken == nil else {
                return CloudKitResponse(
                    reply: .badRequest("a request is signed with a server-to-server key or carries a web auth token, not both"),
                    delay: .milliseconds(takeDelay()))
            }
            if let refusal = refusal(
                of: signed, path: request.path, body: request.body, database: isDevice ? "device" : database,
                now: Date().addingTimeInterval(configuration.clockOffset))
            {
                return CloudKitResponse(reply: refusal, delay: .milliseconds(takeDelay()))
            }
            rotated = nil
        } else {
            switch authenticate(apiToken: request.apiToken, webAuthToken: request.webAuthToken, origin: request.apiOrigin) {
            case .refused(let reply):
                // No new token on an authentication failure: handing out a valid token with a 401
                // would let a client that always keeps the newest token carry on as if signed in.
                return CloudKitResponse(reply: reply, delay: .milliseconds(takeDelay()))
            case .accepted(let token):
                rotated = token
            }
        }
        var response = CloudKitResponse(reply: Reply(body: []), rotatedToken: rotated, delay: .milliseconds(takeDelay()))
        if tooManyInFlight {
            let retryAfter = configuration.throttleRetryAfter
            response.reply = .error(429, "THROTTLED", "too many requests in flight: retry after \(retryAfter) s", retryAfter: retryAfter)
            return response
        }
        let zone = operation == "records/changes" ? decode(RecordsChangesBody.self, from: request.body, emptyAs: nil)?.zoneID?.zoneName : nil
        let fault = takeFault(path: request.path, zone: zone)
        if case .reply(let reply)? = fault {
            response.reply = reply
            return response
        }
        response.reply =
            isDevice
            ? routeDevice(
                method: request.method, container: container, environment: environment, operation: operation, body: request.body,
                courierBase: "\(configuration.scheme)://\(request.courierHost):\(courierPort)")
            : route(
                method: request.method, container: container, environment: environment, database: database,
                operation: operation, body: request.body)
        if operation == "records/changes" || operation == "changes/database", !isDevice {
            response.reply = stalled(response.reply, operation: operation, request: request.body)
        }
        switch fault {
        case .cutShort(let bytes)?: response.delivery = .cutShort(bytes: bytes)
        case .trickle(let interval)?: response.delivery = .trickle(interval: interval)
        case .hold(let duration)?: response.delay += duration
        case .rewrite(let pairs)?:
            for pair in pairs { response.reply.body = Self.replacing(pair.find, with: pair.replace, in: response.reply.body) }
        case .pad(let bytes)?: response.reply.body += [UInt8](repeating: UInt8(ascii: " "), count: max(0, bytes - response.reply.body.count))
        case .reply?, nil: break
        }
        return response
    }

    func route(method: String, container: String, environment: String, database: String, operation: String, body: [UInt8]) -> Reply {
        guard container == configuration.container else {
            return .badRequest("unknown container '\(container)' (this server serves \(configuration.container))")
        }
        guard environment == configuration.environment else {
            return .badRequest("unknown environment '\(environment)' (this server serves \(configuration.environment))")
        }
        guard database == "public" || databases[database] != nil else {
            return .badRequest("unknown database '\(database)': use public, private or shared")
        }
        switch (operation, method) {
        case ("tokens/create", _), ("tokens/register", _):
            // The documented path; the live service serves these only under /device/1/….
            return .error(405, "BAD_REQUEST", "\(operation) is served under /device/1/{container}/{environment}/\(operation)")
        case ("subscriptions/list", "GET"), ("subscriptions/list", "POST"), ("subscriptions/modify", "POST"):
            return operation == "subscriptions/list" ? subscriptionsList(database: database) : subscriptionsModify(database: database, body: body)
        case ("users/caller", "GET"), ("users/current", "GET"):
            guard database == "public" else {
                return .badRequest("\(operation) is served under the public database: …/public/\(operation)")
            }
            return operation == "users/caller" ? usersCaller() : usersCurrent()
        case ("records/changes", "POST"), ("changes/database", "POST"), ("zones/list", "GET"), ("zones/list", "POST"):
            guard database != "public" else {
                return .badRequest("\(operation) needs the private or shared database: the public database has no change feed")
            }
            switch operation {
            case "records/changes":
                guard let request = decode(RecordsChangesBody.self, from: body, emptyAs: nil) else {
                    return .badRequest("records/changes: the body is not a JSON object with a zoneID")
                }
                return recordsChanges(database: database, request: request)
            case "changes/database":
                guard let request = decode(DatabaseChangesBody.self, from: body, emptyAs: DatabaseChangesBody()) else {
                    return .badRequest("changes/database: the body is not a JSON object")
                }
                return databaseChanges(database: database, request: request)
            default:
                return zonesList(database: database)
            }
        case ("records/query", "POST"):
            return recordsQuery(database: database, body: body)
        case ("records/lookup", "POST"):
            return recordsLookup(database: database, body: body)
        case ("users/caller", _), ("users/current", _), ("records/changes", _), ("changes/database", _), ("zones/list", _), ("records/query", _),
            ("records/lookup", _):
            return .error(405, "BAD_REQUEST", "\(operation) does not accept \(method)")
        default:
            return .error(404, "NOT_FOUND", "the fake server does not serve \(operation)")
        }
    }

    func decode<T: Decodable>(_ type: T.Type, from body: [UInt8], emptyAs empty: T?) -> T? {
        if body.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) { return empty }
        return try? JSONDecoder().decode(T.self, from: Data(body))
    }

    static func limit(_ requested: Int?) -> Int? {
        let limit = requested ?? 200
        return (1...200).contains(limit) ? limit : nil
    }

    // MARK: records/changes

    func recordsChanges(database: String, request: RecordsChangesBody) -> Reply {
        guard let requestedZone = request.zoneID else { return .badRequest("records/changes needs a zoneID") }
        guard requestedZone.zoneName != "_defaultZone" else {
            return .badRequest("records/changes needs a custom zone: _defaultZone has no change feed")
        }
        guard let limit = Self.limit(request.resultsLimit) else {
            return .badRequest("resultsLimit must be between 1 and 200")
        }
        guard let key = zoneKey(named: requestedZone.zoneName, owner: requestedZone.ownerRecordName, database: database),
            let zone = databases[database]!.zones[key]
        else {
            return .error(404, "ZONE_NOT_FOUND", "zone '\(requestedZone.zoneName)' does not exist in the \(database) database")
        }
        var position = zone.historyCount
        var offset: Int? = 0
        if let text = request.syncToken {
            guard let token = SyncToken(encoded: text) else {
                return .badRequest("malformed sync token: not a token this server issued")
            }
            guard token.kind == .zone, token.database == database, token.zoneName == zone.id.zoneName,
                token.ownerRecordName == zone.id.ownerRecordName
            else {
                return .badRequest("sync token belongs to another zone or database, not zone '\(zone.id.zoneName)'")
            }
            guard token.feed == feedTag, token.epoch == zone.epoch, token.position <= zone.historyCount else {
                return .badRequest("sync token has expired (CHANGE_TOKEN_EXPIRED): refetch zone '\(zone.id.zoneName)' from a nil token")
            }
            position = token.position
            offset = token.offset
        }
        if request.desiredKeys == nil,
            let body = preparedPages[PreparedPageKey(database: database, zone: key, syncToken: request.syncToken, limit: limit)]
        {
            preparedPagesServed += 1
            return Reply(body: body)
        }

        var writer = JSONWriter(capacity: 320 * 1024)
        writer.sortsKeys = false
        writer.literal("{\"records\":[")
        let desiredKeys = request.desiredKeys.map(Set.init)
        let next: SyncToken
        let moreComing: Bool
        if let offset {
            // A nil-token fetch, or a later page of one: the live records at `position`.
            let live = snapshot(database: database, zone: zone, position: position)
            guard offset <= live.count else { return .badRequest("malformed sync token: offset beyond its snapshot") }
            let end = min(live.count, offset + limit)
            let records = records(of: zone, at: live[offset..<end])
            // By index: each record is written where it is, not copied out first.
            for i in records.indices {
                if i > 0 { writer.literal(",") }
                writer.write(record: records[i], zoneID: zone.id, desiredKeys: desiredKeys)
            }
            if end < live.count {
                next = token(for: zone, database: database, position: position, offset: end)
                moreComing = true
            } else {
                next = token(for: zone, database: database, position: position)
                moreComing = position < zone.historyCount
            }
        } else {
            let end = min(zone.historyCount, position + limit)
            for (i, entry) in entries(of: zone, range: position..<end).enumerated() {
                if i > 0 { writer.literal(",") }
                writer.write(entry: entry, zoneID: zone.id, desiredKeys: desiredKeys)
            }
            next = token(for: zone, database: database, position: end)
            moreComing = end < zone.historyCount
        }
        writer.literal("],\"syncToken\":")
        writer.writeString(next.encoded)
        writer.literal(",\"moreComing\":")
        moreComing ? writer.literal("true") : writer.literal("false")
        writer.literal(",\"reverse\":false}")
        return Reply(body: writer.bytes)
    }

    /// Renders, for every zone, the pages of `limit` records that a fetch from a nil token
    /// receives, following each page's token, and keeps them to answer those requests from
    /// memory. Returns how many pages and bytes that is.
    func preparePages(limit: Int = 200) -> (pages: Int, bytes: Int) {
        var pages = 0
        var bytes = 0
        for database in Self.databaseNames {
            for key in databases[database]!.order {
                guard let zone = databases[database]!.zones[key] else { continue }
                let zoneID = ZoneIDBody(zoneName: zone.id.zoneName, ownerRecordName: zone.id.ownerRecordName)
                var token: String?
                while true {
                    let reply = recordsChanges(database: database, request: RecordsChangesBody(zoneID: zoneID, syncToken: token, resultsLimit: limit))
                    guard reply.status == 200 else { break }
                    preparedPages[PreparedPageKey(database: database, zone: key, syncToken: token, limit: limit)] = reply.body
                    pages += 1
                    bytes += reply.body.count
                    let next = reply.body.withUnsafeBufferPointer { body in
                        (
                            token: JSONReader.lastMember("syncToken", in: body) { try $0.readString() },
                            moreComing: JSONReader.lastMember("moreComing", in: body) { try $0.readBool() }
                        )
                    }
                    guard next.moreComing == true, let nextToken = next.token, nextToken != token else { break }
                    token = nextToken
                }
            }
        }
        return (pages, bytes)
    }

    func token(for zone: Zone, database: String, position: Int, offset: Int? = nil) -> SyncToken {
        SyncToken(kind: .zone, feed: feedTag, database: database, zone: zone.id, epoch: zone.epoch, position: position, offset: offset)
    }

    // MARK: changes/database

    func databaseChanges(database: String, request: DatabaseChangesBody) -> Reply {
        guard let limit = Self.limit(request.resultsLimit) else {
            return .badRequest("resultsLimit must be between 1 and 200")
        }
        let events = databases[database]!.events
        var position = events.count
        var offset: Int? = 0
        if let text = request.syncToken {
            guard let token = SyncToken(encoded: text) else {
                return .badRequest("malformed sync token: not a token this server issued")
            }
            guard token.kind == .database, token.database == database else {
                return .badRequest("sync token is not a \(database) database token (a zone token cannot be used here)")
            }
            guard token.feed == feedTag, token.epoch == databases[database]!.feedEpoch, token.position <= events.count else {
                return .badRequest("database sync token has expired (CHANGE_TOKEN_EXPIRED): refetch from a nil token")
            }
            position = token.position
            offset = token.offset
        }
        var entries: [ZoneEvent] = []
        let next: SyncToken
        let moreComing: Bool
        if let offset {
            // A nil-token fetch: the zones alive at `position`, all as changed.
            let alive = aliveZones(events: events[..<position])
            guard offset <= alive.count else { return .badRequest("malformed sync token: offset beyond its snapshot") }
            let end = min(alive.count, offset + limit)
            entries = alive[offset..<end].map { ZoneEvent(zoneID: $0, kind: .changed) }
            if end < alive.count {
                next = SyncToken(kind: .database, feed: feedTag, database: database, epoch: databases[database]!.feedEpoch, position: position, offset: end)
                moreComing = true
            } else {
                next = SyncToken(kind: .database, feed: feedTag, database: database, epoch: databases[database]!.feedEpoch, position: position)
                moreComing = position < events.count
            }
        } else {
            // Events since the token, one entry per zone for a run of changes; a deletion
            // replaces the zone's pending change, since there is nothing left to fetch.
            var out: [ZoneEvent?] = []
            var pendingChange: [ZoneKey: Int] = [:]
            var count = 0
            var i = position
            while i < events.count {
                let event = events[i]
                let key = ZoneKey(event.zoneID)
                if event.kind == .changed, pendingChange[key] != nil {
                    i += 1
                    continue
                }
                if count == limit { break }
                if event.kind == .deleted || event.kind == .purged, let pending = pendingChange[key] {
                    out[pending] = nil
                    count -= 1
                }
                pendingChange[key] = event.kind == .changed ? out.count : nil
                out.append(event)
                count += 1
                i += 1
            }
            entries = out.compactMap { $0 }
            next = SyncToken(kind: .database, feed: feedTag, database: database, epoch: databases[database]!.feedEpoch, position: i)
            moreComing = i < events.count
        }

        var writer = JSONWriter(capacity: 256 + entries.count * 128)
        writer.literal("{\"zones\":[")
        for (i, entry) in entries.enumerated() {
            if i > 0 { writer.literal(",") }
            writer.literal("{\"zoneID\":")
            writer.write(zoneID: entry.zoneID)
            switch entry.kind {
            case .changed: break
            case .deleted: writer.literal(",\"deleted\":true")
            // A purged zone is a deleted zone too: a client that knows only `deleted` (all REST
            // documents) still drops it.
            case .purged: writer.literal(",\"deleted\":true,\"purged\":true")
            case .encryptedDataReset: writer.literal(",\"encryptedDataReset\":true")
            }
            writer.literal("}")
        }
        writer.literal("],\"syncToken\":")
        writer.writeString(next.encoded)
        writer.literal(",\"moreComing\":")
        moreComing ? writer.literal("true}") : writer.literal("false}")
        return Reply(body: writer.bytes)
    }

    /// The zones alive after the given events, in creation order.
    func aliveZones(events: ArraySlice<ZoneEvent>) -> [ZoneID] {
        var order: [ZoneID] = []
        var alive: Set<ZoneKey> = []
        for event in events {
            let key = ZoneKey(event.zoneID)
            switch event.kind {
            case .changed:
                if alive.insert(key).inserted { order.append(event.zoneID) }
            case .deleted, .purged:
                if alive.remove(key) != nil { order.removeAll { ZoneKey($0) == key } }
            case .encryptedDataReset:
                break
            }
        }
        return order
    }

    // MARK: zones/list, users/caller

    func zonesList(database: String) -> Reply {
        let db = databases[database]!
        var writer = JSONWriter(capacity: 256 + db.order.count * 256)
        writer.literal("{\"zones\":[")
        for (i, zone) in db.order.compactMap({ db.zones[$0] }).enumerated() {
            if i > 0 { writer.literal(",") }
            writer.literal("{\"zoneID\":")
            writer.write(zoneID: zone.id)
            writer.literal(",\"syncToken\":")
            writer.writeString(token(for: zone, database: database, position: zone.historyCount).encoded)
            writer.literal(",\"atomic\":true}")
        }
        writer.literal("]}")
        return Reply(body: writer.bytes)
    }

    func usersCaller() -> Reply {
        var writer = JSONWriter()
        writer.literal("{\"users\":[{\"userRecordName\":")
        writer.writeString(userRecordName)
        writer.literal(",\"nameComponents\":{\"givenName\":\"Fake\",\"familyName\":\"User\"},\"lookupInfo\":{}}]}")
        return Reply(body: writer.bytes)
    }

    /// The deprecated `users/current`: `{userRecordName, firstName, lastName}`.
    func usersCurrent() -> Reply {
        var writer = JSONWriter()
        writer.literal("{\"userRecordName\":")
        writer.writeString(userRecordName)
        writer.literal(",\"firstName\":\"Fake\",\"lastName\":\"User\"}")
        return Reply(body: writer.bytes)
    }
}
