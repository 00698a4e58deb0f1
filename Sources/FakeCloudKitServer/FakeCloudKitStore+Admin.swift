import CloudKitModel
import Foundation

/// The admin endpoints: JSON over `POST /admin/…` (and `GET /admin/state`), without
/// authentication, answered only to loopback clients. Every body may name a `database`
/// (`private`, the default, `shared` or `public`); a zone is named by `zone` (its zoneName) and, when the
/// name alone is ambiguous, `ownerRecordName`.
///
/// | endpoint | body | effect |
/// |---|---|---|
/// | `records/add` | `{zone, records: [record JSON]}` | appends records (or `{recordName, deleted: true}` entries, or per-record errors `{recordName, serverErrorCode, reason}`) to the zone's history; creates the zone if it does not exist |
/// | `records/delete` | `{zone, recordNames: […]}` | appends deletions |
/// | `zones/create` | `{zone}` | creates an empty zone (a no-op for a live one) |
/// | | | `records/add` and `records/delete` with `zone: _defaultZone` write the database's default zone (in `public` too): no change feed, read by `records/query`, each entry seen by queries once its index lag (`--index-lag`) has passed |
/// | `indexes/set` | `{recordType, queryable?: ["___modTime", "___recordID"], sortable?: ["___modTime"]}` | the system indexes a record type has (every one, until set); a query that needs one it lacks is refused 400 `BAD_REQUEST` naming it |
/// | `zones/delete`, `zones/purge` | `{zone}` | removes the zone: fetches answer 404 `ZONE_NOT_FOUND`, the database feed reports `deleted: true` (and `purged: true`) |
/// | `zones/reset-encrypted-data` | `{zone}` | the database feed reports `encryptedDataReset: true`; the zone's tokens expire |
/// | `zones/expire-tokens` | `{zone}` | every token issued so far for the zone is answered 400 `BAD_REQUEST` |
/// | `database/expire-tokens` | `{}` | every token of the database feed (`changes/database`) issued so far is answered 400 `BAD_REQUEST` |
/// | `auth/revoke` | `{initial: true}` or `{all: true}` | revokes the configured web auth tokens, or every token |
/// | `auth/stale-token-answer` | `{status: 401 or 421}` | how a web auth token the server issued and no longer accepts (`--token-window`) is answered: 401 `AUTHENTICATION_FAILED` (the default) or 421 `AUTHENTICATION_REQUIRED` with the sign-in address; which CloudKit sends is not documented |
/// | `auth/grant` | `{webAuthToken}` | accepts one more web auth token |
/// | `auth/sign-in` | `{callback?, refuse?, elapseSeconds?}` | where the sign-in page sends the browser (the API token's sign-in callback), whether it refuses every sign-in (`error=refused` on the callback), and seconds that pass at once for every session's lifetime; answers the counts of sign-ins, cancels, refusals and requests refused because their session had ended |
/// | `user` | `{userRecordName}` | what `users/caller` answers from now on |
/// | `faults/fail` | `{status: 503, count: 1, pathSuffix?, serverErrorCode?, reason?, retryAfter?, body?, headers?}` | the next `count` CloudKit requests (ending in `pathSuffix`, if set) get that status (200...599) and a CloudKit error body (or `body` as given: a 200 with a body of the wrong shape, say) |
/// | `faults/throttle` | `{count: 1, retryAfter: 1, retryAfterHeader: false, pathSuffix?}` | 429 `THROTTLED` with `retryAfter`, and a `Retry-After` header (whole seconds, rounded up) when asked |
/// | `faults/delay` | `{milliseconds, count?}` | delays the next `count` responses (every response, without `count`; 0 turns it off) |
/// | `faults/cut` | `{count: 1, pathSuffix?, bytes?}` | sends the real response's head with its full `Content-Length`, `bytes` of the body (half unless told; 0: a connection reset after the head), then closes the connection |
/// | `faults/trickle` | `{count: 1, pathSuffix?, milliseconds: 1000}` | sends the real response's head at once, then its body one byte every `milliseconds` |
/// | `faults/hold` | `{count: 1, pathSuffix?, milliseconds}` | keeps the real response, and the request in flight, for `milliseconds` (up to ten minutes) before it leaves: a request the client is surely waiting on |
/// | `faults/rewrite` | `{count: 1, pathSuffix?, replacements: [{find, replace?, replaceBase64?}]}` | the real response with every `find` in its body replaced by `replace`, or by the raw bytes of `replaceBase64` (text that is not UTF-8, a `\ud800` escape, control characters) |
/// | `faults/pad` | `{count: 1, pathSuffix?, bytes}` | the real response, its JSON followed by spaces up to `bytes` |
/// | `faults/stall` | `{zone, mode}` or `{feed: "database", mode}` | the zone's `records/changes` (or the database's `changes/database`) never advances, always saying more is coming: `sameToken` (the token it was asked from), `emptyPages` (no records or zones, a new token each time), `repeatPage` (the same records or zones, a new token each time); until `faults/clear` |
/// | `faults/garbage` | `{count: 1, status: 200, pathSuffix?}` | answers with an HTML page instead of JSON |
/// | | | every `faults/…` but `stall` also takes `zone`: only that zone's `records/changes` meets the fault |
/// | `faults/misdirect` | `{count: 1}` | the next CloudKit request marks the connection it came on as misdirected: that request and the next `count - 1` on the same connection are answered 421 Misdirected Request with an HTML page, not CloudKit's JSON body (Apple's edge, for a connection made for another host); other connections are answered as usual, and the fault ends when the connection closes |
/// | `faults/gate` | `{count, pathSuffix?, milliseconds: 60000}` | keeps the next `count` CloudKit requests (ending in `pathSuffix`, if set) until the last of them has arrived, then lets them all on at once; each waits at most `milliseconds` (up to ten minutes): clients started one after another begin together |
/// | `faults/clear` | `{}` | drops every pending fault, gate, stall and delay, and lets through what a gate keeps |
/// | `notifications` | `{drop?, delayMilliseconds?, refuseCourier?, courierTimeoutMilliseconds?, courierAnswer?}` | drops the notifications of changes from now on (lost, as pushes may be), delays them, makes the courier answer 401 to every token, sets how long an empty long poll waits (25 s unless told), or makes it answer every poll at once with a body (`""`: no longer) |
/// | `stats/reset` | `{}` | starts the traffic counters of `state` over (the prepared pages stay) |
/// | `state` (GET or POST) | | counts: requests served, faults served, pages prepared and prepared pages served, requests kept at gates not yet open (`keptAtGates`), zones with their history length and epoch, zone events, the default zone's history length and its entries queries do not see yet (`indexPending`); and `traffic`: CloudKit requests since `stats/reset`, the peak in flight, how many arrived while another was in flight (`overlapped`), how many were throttled for too many in flight and the peak in flight once the first of those had its `retryAfter` waited out, among requests sent after it (with a token window: carrying a token issued since) (`peakInFlightAfterThrottle`), how many carried a web auth token the server no longer accepts (`staleTokenRefusals`), how many connections carried them (`connections`) and how many were answered 421 by `faults/misdirect` (`misdirected`), the record names `records/lookup` was asked for (`lookedUp`), and the bytes of the answers' bodies (`bodyBytes`) |
extension FakeCloudKitStore {
    struct AdminBody: Decodable {
        var database: String?
        var zone: String?
        /// `faults/stall`: `database` for the database's change feed instead of a zone's.
        var feed: String?
        var ownerRecordName: String?
        var records: [RecordEntry]?
        var recordNames: [String]?
        // auth and user
        var initial: Bool?
        var all: Bool?
        var webAuthToken: String?
        var userRecordName: String?
        var callback: String?
        var refuse: Bool?
        var elapseSeconds: Int?
        // faults
        var count: Int?
        var pathSuffix: String?
        var status: Int?
        var serverErrorCode: String?
        var reason: String?
        var retryAfter: Double?
        var retryAfterHeader: Bool?
        var body: JSONValue?
        var headers: [String: String]?
        var milliseconds: Int?
        var bytes: Int?
        var replacements: [Replacement]?
        struct Replacement: Decodable {
            var find: String
            var replace: String?
            var replaceBase64: String?
        }
        var mode: String?
        // indexes
        var recordType: String?
        var queryable: [String]?
        var sortable: [String]?
        // notifications
        var drop: Bool?
        var delayMilliseconds: Int?
        var refuseCourier: Bool?
        var courierTimeoutMilliseconds: Int?
        var courierAnswer: String?
    }

    func handleAdmin(method: String, path: String, body bytes: [UInt8]) -> Reply {
        let operation = path.split(separator: "/").dropFirst().joined(separator: "/")
        if operation == "state" {
            return state()
        }
        guard method == "POST" else { return .adminError("admin endpoints take POST with a JSON body", status: 405) }
        if operation == "stats/reset" {
            traffic = Traffic(inFlight: traffic.inFlight)
            // Connections are counted again from their next request.
            countedConnections = []
            return .admin(.object(["ok": .bool(true)]))
        }
        preparedPages = [:]
        let body: AdminBody
        do {
            body = bytes.isEmpty ? AdminBody() : try JSONDecoder().decode(AdminBody.self, from: Data(bytes))
        } catch {
            return .adminError("the body is not the JSON this endpoint expects: \(error)")
        }
        let database = body.database ?? "private"
        guard databases[database] != nil else { return .adminError("unknown database '\(database)' (private, shared or public)") }

        switch operation {
        case "notifications":
            return setNotificationSwitches(body)
        case "records/add", "records/delete", "zones/create":
            guard let zoneName = body.zone, !zoneName.isEmpty else { return .adminError("\(operation) needs a zone") }
            if zoneName == ZoneID.defaultZoneName {
                guard operation != "zones/create" else { return .adminError("every database has its _defaultZone") }
                let entries = operation == "records/add" ? body.records ?? [] : (body.recordNames ?? []).map { .deleted(recordName: $0) }
                appendToDefaultZone(entries, database: database)
                return .admin(.object(["zone": .string(ZoneID.defaultZoneName), "history": .int(Int64(databases[database]!.defaultZone.historyCount))]))
            }
            let key: ZoneKey
            if let existing = zoneKey(named: zoneName, owner: body.ownerRecordName, database: database) {
                key = existing
            } else {
                let id = ZoneID(zoneName: zoneName, ownerRecordName: body.ownerRecordName ?? configuration.settings.owner, zoneType: "REGULAR_CUSTOM_ZONE")
                createZone(id, database: database)
                key = ZoneKey(id)
            }
            if operation == "records/add" {
                append(body.records ?? [], to: key, database: database)
            } else if operation == "records/delete" {
                append((body.recordNames ?? []).map { .deleted(recordName: $0) }, to: key, database: database)
            }
            return zoneSummary(key, database: database)

        case "zones/delete", "zones/purge", "zones/reset-encrypted-data", "zones/expire-tokens":
            guard let zoneName = body.zone, let key = zoneKey(named: zoneName, owner: body.ownerRecordName, database: database) else {
                return .adminError("no live zone '\(body.zone ?? "")' in the \(database) database", status: 404)
            }
            switch operation {
            case "zones/delete": removeZone(key, database: database, kind: .deleted)
            case "zones/purge": removeZone(key, database: database, kind: .purged)
            case "zones/reset-encrypted-data":
                databases[database]!.zones[key]!.epoch = newEpoch()
                appendZoneEvent(ZoneEvent(zoneID: databases[database]!.zones[key]!.id, kind: .encryptedDataReset), database: database)
            default:
                databases[database]!.zones[key]!.epoch = newEpoch()
            }
            return .admin(.object(["ok": .bool(true)]))

        case "database/expire-tokens":
            databases[database]!.feedEpoch = newEpoch()
            return .admin(.object(["ok": .bool(true)]))

        case "indexes/set":
            guard let recordType = body.recordType, !recordType.isEmpty else { return .adminError("indexes/set needs a recordType") }
            let queryable = Set(body.queryable ?? ["___modTime", "___recordID"])
            let sortable = Set(body.sortable ?? ["___modTime"])
            queryIndexes[recordType] = QueryIndexes(
                modTimeQueryable: queryable.contains("___modTime"), modTimeSortable: sortable.contains("___modTime"),
                recordIDQueryable: queryable.contains("___recordID"))
            return .admin(.object(["ok": .bool(true)]))

        case "auth/revoke":
            if body.all == true {
                initialTokens = []
                tokenPositions = [:]
                everIssued = []
            } else if body.initial == true {
                initialTokens = []
            } else {
                return .adminError("auth/revoke needs {\"initial\": true} or {\"all\": true}")
            }
            return .admin(.object(["ok": .bool(true)]))

        case "auth/stale-token-answer":
            guard let status = body.status, status == 401 || status == 421 else { return .adminError("auth/stale-token-answer needs status: 401 or 421") }
            staleTokenStatus = status
            return .admin(.object(["ok": .bool(true)]))

        case "auth/grant":
            guard let token = body.webAuthToken, !token.isEmpty else { return .adminError("auth/grant needs a webAuthToken") }
            initialTokens.insert(token)
            return .admin(.object(["ok": .bool(true)]))

        case "auth/sign-in":
            return configureSignIn(callback: body.callback, refuse: body.refuse, elapseSeconds: body.elapseSeconds)

        case "user":
            guard let name = body.userRecordName, !name.isEmpty else { return .adminError("user needs a userRecordName") }
            userRecordName = name
            return .admin(.object(["ok": .bool(true)]))

        case "faults/stall":
            let feed = body.feed == "database" ? Self.databaseFeed : body.zone
            guard let feed, let mode = body.mode.flatMap(Stall.init(rawValue:)) else {
                return .adminError(
                    "faults/stall needs a zone (or feed: database) and a mode (\(Stall.allCases.map(\.rawValue).joined(separator: ", ")))")
            }
            stalls[feed] = StalledZone(mode: mode)
            return .admin(.object(["ok": .bool(true)]))

        case "faults/fail", "faults/throttle", "faults/cut", "faults/garbage", "faults/trickle", "faults/hold", "faults/rewrite", "faults/pad":
            let count = body.count ?? 1
            guard count >= 1 else { return .adminError("count must be at least 1") }
            let action: Fault.Action
            switch operation {
            case "faults/fail":
                let status = body.status ?? 503
                guard (200...599).contains(status) else { return .adminError("status must be 200...599") }
                var reply: Reply
                if let given = body.body {
                    reply = .admin(given, status: status)
                } else {
                    let code = body.serverErrorCode ?? Self.serverErrorCode(status: status)
                    reply = .error(status, code, body.reason ?? "injected fault: \(code)", retryAfter: body.retryAfter)
                }
                if let bad = body.headers?.keys.first(where: { !isHeaderName($0) }) {
                    return .adminError("'\(bad)' is not an HTTP header name")
                }
                reply.headers = (body.headers ?? [:]).sorted { $0.key < $1.key }.map { (name: $0.key, value: $0.value) }
                action = .reply(reply)
            case "faults/throttle":
                let retryAfter = body.retryAfter ?? 1
                var reply = Reply.error(429, "THROTTLED", body.reason ?? "request throttled: retry after \(retryAfter) s", retryAfter: retryAfter)
                if body.retryAfterHeader == true {
                    reply.headers = [(name: "Retry-After", value: String(Int(retryAfter.rounded(.up))))]
                }
                action = .reply(reply)
            case "faults/cut":
                guard (body.bytes ?? 0) >= 0 else { return .adminError("bytes must be 0 or more") }
                action = .cutShort(bytes: body.bytes)
            case "faults/trickle":
                guard let milliseconds = body.milliseconds, (1...60_000).contains(milliseconds) else {
                    return .adminError("faults/trickle needs milliseconds (1...60000)")
                }
                action = .trickle(interval: .milliseconds(milliseconds))
            case "faults/hold":
                guard let milliseconds = body.milliseconds, (1...600_000).contains(milliseconds) else {
                    return .adminError("faults/hold needs milliseconds (1...600000)")
                }
                action = .hold(.milliseconds(milliseconds))
            case "faults/rewrite":
                guard let replacements = body.replacements, !replacements.isEmpty, replacements.allSatisfy({ !$0.find.isEmpty }) else {
                    return .adminError("faults/rewrite needs replacements: [{find, replace or replaceBase64}]")
                }
                var pairs: [(find: [UInt8], replace: [UInt8])] = []
                for replacement in replacements {
                    if let encoded = replacement.replaceBase64 {
                        guard let bytes = Base64.decode(encoded) else { return .adminError("replaceBase64 is not base64") }
                        pairs.append((Array(replacement.find.utf8), bytes))
                    } else {
                        pairs.append((Array(replacement.find.utf8), Array((replacement.replace ?? "").utf8)))
                    }
                }
                action = .rewrite(pairs)
            case "faults/pad":
                guard let bytes = body.bytes, (0...1 << 30).contains(bytes) else { return .adminError("faults/pad needs bytes (up to 1 GiB)") }
                action = .pad(bytes: bytes)
            default:
                let html = "<html><head><title>502 Bad Gateway</title></head><body><h1>Bad Gateway</h1></body></html>\n"
                action = .reply(Reply(status: body.status ?? 200, body: Array(html.utf8), contentType: "text/html; charset=UTF-8"))
            }
            faults.append(Fault(action: action, remaining: count, pathSuffix: body.pathSuffix, zone: body.zone))
            return .admin(.object(["ok": .bool(true), "pendingFaults": .int(Int64(faults.count))]))

        case "faults/misdirect":
            misdirect = (remaining: max(1, body.count ?? 1), connection: nil)
            return .admin(.object(["ok": .bool(true)]))
        case "faults/delay":
            guard let milliseconds = body.milliseconds, milliseconds >= 0 else { return .adminError("faults/delay needs milliseconds") }
            delayMilliseconds = milliseconds
            delayRemaining = body.count
            return .admin(.object(["ok": .bool(true)]))

        case "faults/gate":
            guard let count = body.count, (1...1_000).contains(count) else { return .adminError("faults/gate needs a count (1...1000)") }
            let milliseconds = body.milliseconds ?? 60_000
            guard (1...600_000).contains(milliseconds) else { return .adminError("faults/gate's milliseconds must be 1...600000") }
            gatesMade += 1
            gates.append(Gate(id: gatesMade, count: count, pathSuffix: body.pathSuffix, timeout: .milliseconds(milliseconds)))
            return .admin(.object(["ok": .bool(true)]))

        case "faults/clear":
            faults = []
            gates = []
            stalls = [:]
            delayMilliseconds = 0
            delayRemaining = nil
            misdirect = nil
            return .admin(.object(["ok": .bool(true)]))

        default:
            return .adminError("no admin endpoint \(operation)", status: 404)
        }
    }

    static func serverErrorCode(status: Int) -> String {
        switch status {
        case 400: return "BAD_REQUEST"
        case 401: return "AUTHENTICATION_FAILED"
        case 403: return "ACCESS_DENIED"
        case 404: return "NOT_FOUND"
        case 409: return "CONFLICT"
        case 412: return "VALIDATING_REFERENCE_ERROR"
        case 413: return "QUOTA_EXCEEDED"
        case 421: return "AUTHENTICATION_REQUIRED"
        case 429: return "THROTTLED"
        case 503: return "TRY_AGAIN_LATER"
        default: return "INTERNAL_ERROR"
        }
    }

    func zoneSummary(_ key: ZoneKey, database: String) -> Reply {
        let zone = databases[database]!.zones[key]!
        return .admin(
            .object([
                "ok": .bool(true),
                "zoneID": zone.id.json,
                "historyLength": .int(Int64(zone.historyCount)),
                "syncToken": .string(token(for: zone, database: database, position: zone.historyCount).encoded),
            ]))
    }

    func state() -> Reply {
        var dbs: [String: JSONValue] = [:]
        for (name, db) in databases {
            let zones: [JSONValue] = db.order.compactMap { db.zones[$0] }.map { zone in
                .object([
                    "zoneName": .string(zone.id.zoneName),
                    "ownerRecordName": .string(zone.id.ownerRecordName),
                    "historyLength": .int(Int64(zone.historyCount)),
                    "epoch": .int(Int64(zone.epoch)),
                ])
            }
            // Entries of the default zone that queries do not see yet (`--index-lag`): a test waits
            // for none before it expects a run to find everything.
            let now = DispatchTime.now().uptimeNanoseconds
            let pending = db.defaultZone.visibleAt.reduce(0) { $0 + ($1 > now ? 1 : 0) }
            dbs[name] = .object([
                "zones": .array(zones), "zoneEvents": .int(Int64(db.events.count)),
                "defaultZone": .object(["historyLength": .int(Int64(db.defaultZone.historyCount)), "indexPending": .int(Int64(pending))]),
            ])
        }
        var trafficJSON: [String: JSONValue] = [
            "requests": .int(Int64(traffic.requests)),
            "inFlight": .int(Int64(traffic.inFlight)),
            "peakInFlight": .int(Int64(traffic.peakInFlight)),
            "bodyBytes": .int(Int64(traffic.bodyBytes)),
            "overlapped": .int(Int64(traffic.overlapped)),
            "throttled": .int(Int64(traffic.throttled)),
            "staleTokenRefusals": .int(Int64(traffic.staleTokenRefusals)),
            "connections": .int(Int64(traffic.connections)),
            "misdirected": .int(Int64(traffic.misdirected)),
            "lookedUp": .int(Int64(traffic.lookedUp)),
        ]
        if let peak = traffic.peakInFlightAfterThrottle { trafficJSON["peakInFlightAfterThrottle"] = .int(Int64(peak)) }
        return .admin(
            .object([
                "traffic": .object(trafficJSON),
                "requestsServed": .int(Int64(requestsServed)),
                "faultsServed": .int(Int64(faultsServed)),
                "preparedPages": .int(Int64(preparedPages.count)),
                "preparedPagesServed": .int(Int64(preparedPagesServed)),
                "pendingFaults": .int(Int64(faults.count)),
                "keptAtGates": .int(Int64(gates.filter { $0.arrived < $0.count }.reduce(0) { $0 + $1.arrived })),
                "userRecordName": .string(userRecordName),
                "databases": .object(dbs),
                "notifications": .object([
                    "subscriptions": .int(Int64(subscriptions.count)),
                    "registeredTokens": .int(Int64(pushTokens.values.filter(\.registered).count)),
                    "queued": .int(Int64(notificationCounts.queued)),
                    "delivered": .int(Int64(notificationCounts.delivered)),
                    "dropped": .int(Int64(notificationCounts.dropped)),
                    "courierPolls": .int(Int64(notificationCounts.courierPolls)),
                ]),
            ]))
    }
}
