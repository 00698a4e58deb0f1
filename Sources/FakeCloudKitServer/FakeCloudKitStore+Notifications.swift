import CloudKitModel
import Foundation

/// Zone subscriptions, push tokens and the web courier, as `field-notes.md` §1 records them and,
/// where nothing is known, in the stricter reading:
///
/// - `subscriptions/list` and `subscriptions/modify` under `/database/1/…/{private|shared|public}/`;
///   `zone` subscriptions in the private and shared databases, `query` subscriptions on a record
///   type of the `_defaultZone` in any (a `database` subscription over REST is unverified, so it
///   is refused: a client must notice new zones another way).
/// - `tokens/create` and `tokens/register` answer only under `/device/1/{container}/{env}/`; the
///   documented `/database/…` path answers 405, as the live service does.
/// - `GET /courier/<apnsToken>` long-polls: one queued notification per answer, never
///   delivered twice; an empty 200 body after `courierTimeout`; a token never registered, or a
///   courier refused by the admin switch, answers 401.
/// - Every change to a zone queues one notification per matching subscription for every
///   registered token, unless notifications are being dropped; they may be delayed. The payload
///   (`ck.fet`) is this fake's guess: Apple's zone payload was never captured, so a client must
///   treat any notification as "something changed".
extension FakeCloudKitStore {
    struct Subscription: Sendable {
        var id: String
        var database: String
        var zone: ZoneKey
        /// The subscription as the client sent it, answered back by `list` and `modify`.
        var json: JSONValue
        /// A query subscription: the record type it watches in the database's `_defaultZone`
        /// and what fires it (`create`, `update`, `delete`); nil for a zone subscription.
        var query: (recordType: String, firesOn: Set<String>)?
    }

    struct PushToken: Sendable {
        var environment: String
        var registered = false
        /// Notifications in the order they were queued, each deliverable from `notBefore` (the
        /// delay switch): kept here rather than queued later by a timer, so that a poll that runs
        /// late still finds what was due.
        var queue: [(payload: [UInt8], notBefore: ContinuousClock.Instant)] = []
    }

    /// The notification switches of `POST /admin/notifications`.
    struct NotificationSwitches: Sendable {
        var drop = false
        var delay: Duration = .zero
        var refuseCourier = false
        var courierTimeout: Duration = .seconds(25)
        /// A body the courier answers every poll with at once, as a broken proxy before it may.
        var courierAnswer: [UInt8]?
    }

    struct NotificationCounts: Sendable {
        var queued = 0
        var delivered = 0
        var dropped = 0
        /// Long polls of the courier begun.
        var courierPolls = 0
    }

    // MARK: Subscriptions

    static let operationsPerRequest = 200

    func subscriptionsList(database: String) -> Reply {
        let items = subscriptions.values.filter { $0.database == database }.sorted { $0.id < $1.id }.map(\.json)
        return .json(.object(["subscriptions": .array(items)]))
    }

    func subscriptionsModify(database: String, body: [UInt8]) -> Reply {
        guard let json = body.withUnsafeBytes({ try? JSONValue(parsing: $0) }), let operations = json["operations"]?.arrayItems else {
            return .badRequest("subscriptions/modify needs {\"operations\": [{\"operationType\", \"subscription\"}]}")
        }
        // Apple's limit of operations a request (reference §7): refused whole, as the strictest
        // reading has it.
        guard operations.count <= Self.operationsPerRequest else {
            return .badRequest("subscriptions/modify takes at most \(Self.operationsPerRequest) operations a request, not \(operations.count)")
        }
        var results: [JSONValue] = []
        for operation in operations {
            let type = operation["operationType"]?.stringValue ?? ""
            guard let subscription = operation["subscription"], let id = subscription["subscriptionID"]?.stringValue, !id.isEmpty else {
                results.append(Self.itemError(nil, "BAD_REQUEST", "an operation without subscription.subscriptionID"))
                continue
            }
            switch type {
            case "create", "update", "replace":
                if subscription["subscriptionType"]?.stringValue == "query" {
                    results.append(modifyQuerySubscription(subscription, id: id, operation: type, database: database))
                    continue
                }
                guard subscription["subscriptionType"]?.stringValue == "zone" else {
                    results.append(
                        Self.itemError(
                            id, "BAD_REQUEST",
                            "only zone and query subscriptions are served (subscriptionType \"zone\" or \"query\"); database subscriptions are not"))
                    continue
                }
                guard database != "public" else {
                    results.append(Self.itemError(id, "BAD_REQUEST", "zone subscriptions need the private or shared database"))
                    continue
                }
                guard let zoneName = subscription["zoneID"]?["zoneName"]?.stringValue else {
                    results.append(Self.itemError(id, "BAD_REQUEST", "a zone subscription needs zoneID.zoneName"))
                    continue
                }
                let owner = subscription["zoneID"]?["ownerRecordName"]?.stringValue
                guard
                    let zone = databases[database]!.zones.values.first(where: { $0.id.zoneName == zoneName && (owner == nil || $0.id.ownerRecordName == owner) }
                    )
                else {
                    results.append(Self.itemError(id, "ZONE_NOT_FOUND", "zone '\(zoneName)' does not exist"))
                    continue
                }
                if type == "create", subscriptions[id] != nil {
                    results.append(Self.itemError(id, "CONFLICT", "subscription '\(id)' already exists"))
                    continue
                }
                subscriptions[id] = Subscription(id: id, database: database, zone: ZoneKey(zone.id), json: subscription)
                results.append(subscription)
            case "delete":
                guard subscriptions.removeValue(forKey: id) != nil else {
                    results.append(Self.itemError(id, "NOT_FOUND", "subscription '\(id)' does not exist"))
                    continue
                }
                results.append(.object(["subscriptionID": .string(id), "deleted": .bool(true)]))
            default:
                results.append(Self.itemError(id, "BAD_REQUEST", "unknown operationType '\(type)' (create, update, replace or delete)"))
            }
        }
        return .json(.object(["subscriptions": .array(results)]))
    }

    /// A query subscription's create, update or replace: the answer's item.
    func modifyQuerySubscription(_ subscription: JSONValue, id: String, operation type: String, database: String) -> JSONValue {
        guard let recordType = subscription["query"]?["recordType"]?.stringValue, !recordType.isEmpty else {
            return Self.itemError(id, "BAD_REQUEST", "a query subscription needs query.recordType")
        }
        let firesOn = Set((subscription["firesOn"]?.arrayItems ?? []).compactMap(\.stringValue))
        guard !firesOn.isEmpty, firesOn.isSubset(of: ["create", "update", "delete"]) else {
            return Self.itemError(id, "BAD_REQUEST", "a query subscription needs firesOn, some of create, update and delete")
        }
        if let zoneName = subscription["zoneID"]?["zoneName"]?.stringValue, zoneName != ZoneID.defaultZoneName {
            return Self.itemError(id, "BAD_REQUEST", "this fake serves query subscriptions on the _defaultZone only")
        }
        if type == "create", subscriptions[id] != nil {
            return Self.itemError(id, "CONFLICT", "subscription '\(id)' already exists")
        }
        subscriptions[id] = Subscription(
            id: id, database: database, zone: ZoneKey(databases[database]!.defaultZone.id), json: subscription,
            query: (recordType, firesOn))
        return subscription
    }

    static func itemError(_ id: String?, _ code: String, _ reason: String) -> JSONValue {
        var members: [String: JSONValue] = ["serverErrorCode": .string(code), "reason": .string(reason)]
        if let id { members["subscriptionID"] = .string(id) }
        return .object(members)
    }

    // MARK: Push tokens

    /// `/device/1/{container}/{environment}/tokens/{create|register}`.
    func routeDevice(method: String, container: String, environment: String, operation: String, body: [UInt8], courierBase: String) -> Reply {
        guard container == configuration.container, environment == configuration.environment else {
            return .badRequest("unknown container or environment (this server serves \(configuration.container) \(configuration.environment))")
        }
        let json = body.withUnsafeBytes { try? JSONValue(parsing: $0) }
        let apnsEnvironment = json?["apnsEnvironment"]?.stringValue ?? ""
        let expected = environment == "production" ? "production" : "development"
        guard apnsEnvironment == expected else {
            return .badRequest("apnsEnvironment must be '\(expected)' for the \(environment) environment")
        }
        switch (operation, method) {
        case ("tokens/create", "POST"):
            let token = "fakeapns" + UUID().uuidString.replacingOccurrences(of: "-", with: "", options: .literal).lowercased()
            pushTokens[token] = PushToken(environment: environment)
            return .json(
                .object([
                    "apnsEnvironment": .string(apnsEnvironment), "apnsToken": .string(token), "webcourierURL": .string("\(courierBase)/courier/\(token)"),
                ]))
        case ("tokens/register", "POST"):
            guard let token = json?["apnsToken"]?.stringValue, pushTokens[token] != nil else {
                return .badRequest("tokens/register needs an apnsToken from tokens/create")
            }
            pushTokens[token]!.registered = true
            return .json(.object(["apnsEnvironment": .string(apnsEnvironment), "apnsToken": .string(token)]))
        default:
            return .error(404, "NOT_FOUND", "no such endpoint: /device/1/…/\(operation)")
        }
    }

    // MARK: The courier

    /// One long poll of the courier: a queued notification, or an empty body after the timeout.
    nonisolated func pollCourier(token: String) async -> Reply {
        let deadline = ContinuousClock.now + (await beginCourierPoll())
        while true {
            if let answer = await takeNotification(token: token) { return answer }
            guard ContinuousClock.now < deadline else { return Reply(status: 200, body: []) }
            do {
                try await Task.sleep(for: .milliseconds(10))
            } catch {
                return Reply(status: 200, body: [])  // the client went away
            }
        }
    }

    /// Counts a long poll begun; how long it waits for a notification.
    private func beginCourierPoll() -> Duration {
        notificationCounts.courierPolls += 1
        return notificationSwitches.courierTimeout
    }

    /// The next notification for `token`, an error, or nil when there is none yet.
    func takeNotification(token: String) -> Reply? {
        guard !notificationSwitches.refuseCourier else {
            return .error(401, "AUTHENTICATION_FAILED", "the courier refuses this token: create and register a new one")
        }
        guard let pushToken = pushTokens[token], pushToken.registered else {
            return .error(401, "AUTHENTICATION_FAILED", "unknown or unregistered push token")
        }
        if let answer = notificationSwitches.courierAnswer { return Reply(status: 200, body: answer) }
        let now = ContinuousClock.now
        guard let due = pushToken.queue.firstIndex(where: { $0.notBefore <= now }) else { return nil }
        notificationCounts.delivered += 1
        return Reply(status: 200, body: pushTokens[token]!.queue.remove(at: due).payload)
    }

    /// Queues what changes to a database's `_defaultZone` tell its query subscribers: for each
    /// change of a watched type, `ck.qry` with the subscription, the record's name and what
    /// happened (`fo`: 1 created, 2 updated, 3 deleted), as CloudKit JS receives it. `changes`
    /// are the records' names, their type (a deleted record's last) and `fo`.
    func notifyQuerySubscribers(of changes: [(name: String, recordType: String, firesOn: Int)], database: String) {
        let watching = subscriptions.values.filter { $0.database == database && $0.query != nil }
        guard !watching.isEmpty, !changes.isEmpty else { return }
        let tokens = pushTokens.filter { $0.value.registered }.map(\.key)
        let words = [1: "create", 2: "update", 3: "delete"]
        for subscription in watching.sorted(by: { $0.id < $1.id }) {
            let (type, firesOn) = subscription.query!
            for change in changes where change.recordType == type && firesOn.contains(words[change.firesOn]!) {
                let nid = UUID().uuidString.lowercased()
                for token in tokens {
                    guard !notificationSwitches.drop else {
                        notificationCounts.dropped += 1
                        continue
                    }
                    pushTokens[token]!.queue.append(
                        (
                            Self.notificationPayload(
                                nid: nid, container: configuration.container,
                                block: "qry",
                                [
                                    "sid": .string(subscription.id), "rid": .string(change.name), "zid": .string(ZoneID.defaultZoneName),
                                    "fo": .int(Int64(change.firesOn)),
                                ]),
                            ContinuousClock.now + notificationSwitches.delay
                        ))
                    notificationCounts.queued += 1
                }
            }
        }
    }

    static func notificationPayload(nid: String, container: String, block: String, _ members: [String: JSONValue]) -> [UInt8] {
        var w = JSONWriter()
        w.write(
            .object([
                "aps": .object(["content-available": .int(1)]),
                "ck": .object(["nid": .string(nid), "cid": .string(container), "ce": .int(2), block: .object(members)]),
            ]))
        return w.bytes
    }

    /// Queues what a change to `zone` tells the subscribers of `database`.
    func notifySubscribers(of zone: ZoneID, database: String) {
        let matching = subscriptions.values.filter { $0.database == database && $0.zone == ZoneKey(zone) && $0.query == nil }
        guard !matching.isEmpty else { return }
        let tokens = pushTokens.filter { $0.value.registered }.map(\.key)
        for subscription in matching {
            let nid = UUID().uuidString.lowercased()
            for token in tokens {
                guard !notificationSwitches.drop else {
                    notificationCounts.dropped += 1
                    continue
                }
                var w = JSONWriter()
                w.write(
                    .object([
                        "aps": .object(["content-available": .int(1)]),
                        "ck": .object([
                            "nid": .string(nid), "cid": .string(configuration.container), "ce": .int(2),
                            "fet": .object([
                                "sid": .string(subscription.id), "zid": .string(zone.zoneName), "zoid": .string(zone.ownerRecordName),
                                "dbs": .int(database == "shared" ? 3 : 2),
                            ]),
                        ]),
                    ]))
                pushTokens[token]!.queue.append((w.bytes, ContinuousClock.now + notificationSwitches.delay))
                notificationCounts.queued += 1
            }
        }
    }

    /// `POST /admin/notifications`: `{drop?, delayMilliseconds?, refuseCourier?, courierTimeoutMilliseconds?, courierAnswer?}`
    /// (`courierAnswer` "" for none).
    func setNotificationSwitches(_ body: AdminBody) -> Reply {
        if let drop = body.drop { notificationSwitches.drop = drop }
        if let delay = body.delayMilliseconds { notificationSwitches.delay = .milliseconds(max(0, delay)) }
        if let refuse = body.refuseCourier { notificationSwitches.refuseCourier = refuse }
        if let timeout = body.courierTimeoutMilliseconds { notificationSwitches.courierTimeout = .milliseconds(max(1, timeout)) }
        if let answer = body.courierAnswer { notificationSwitches.courierAnswer = answer.isEmpty ? nil : Array(answer.utf8) }
        return .admin(.object(["ok": .bool(true)]))
    }
}

extension JSONValue {
    var arrayItems: [JSONValue]? {
        if case .array(let items) = self { return items }
        return nil
    }
}

extension Reply {
    /// A CloudKit answer with a JSON body.
    static func json(_ value: JSONValue) -> Reply {
        var w = JSONWriter()
        w.write(value)
        return Reply(body: w.bytes)
    }
}
