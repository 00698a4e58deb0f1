import CloudKitModel
import CloudKitWebServices
import Logging
import ZoneFeed

/// Zone subscriptions and the web courier (field-notes §1.4): silent zone subscriptions with
/// stable IDs (`<subscriptionPrefix><zoneName>`) for the zones followed, query subscriptions for
/// `_defaultZone`'s record types, a push token from `tokens/create` and `tokens/register`, and
/// the courier long-polled on a client of its own.
extension CloudKitSource: ChangeNotifying {
    public func follow(logger: Logger) async throws {
        let zones: [ZoneID]
        if let named = namedZones { zones = named } else { zones = try await client.listZones(logger: logger).map(\.zoneID) }
        let prefix = subscriptionPrefix
        // A zone with a change feed gets a zone subscription; `_defaultZone`, read by query, a
        // query subscription per record type (`<prefix>_defaultZone.<type>`), whose
        // notifications name the record and bring a deletion without a sweep.
        var wanted: [String: Subscription] = [:]
        for zone in zones {
            if zone.zoneName == ZoneID.defaultZoneName {
                for type in recordTypes {
                    let id = "\(prefix)\(zone.zoneName).\(type)"
                    wanted[id] = .query(recordType: type, id: id)
                }
            } else if wanted[prefix + zone.zoneName] == nil {
                wanted[prefix + zone.zoneName] = .zone(zone, id: prefix + zone.zoneName)
            }
        }
        let ours = try await client.listSubscriptions(logger: logger).filter { Self.isOurs($0, prefix: prefix) }.compactMap(\.subscriptionID)
        let missing = wanted.filter { !ours.contains($0.key) }.sorted { $0.key < $1.key }
        if !missing.isEmpty {
            let results = try await client.createSubscriptions(missing.map(\.value), logger: logger)
            for result in results {
                switch result.serverErrorCode {
                case nil: logger.info("subscribed to the zone's changes", metadata: ["subscription": "\(result.subscriptionID ?? "?")"])
                // Another watcher made it meanwhile, or the zone went away: both are fine.
                case "CONFLICT", "EXISTS", "ZONE_NOT_FOUND": break
                case let code?:
                    logger.warning(
                        "CloudKit refused a subscription; its changes are polled only",
                        metadata: ["subscription": "\(result.subscriptionID ?? "?")", "code": "\(code)", "reason": "\(result.reason ?? "")"])
                }
            }
        }
        let stale = ours.filter { wanted[$0] == nil }
        if !stale.isEmpty {
            _ = try await client.deleteSubscriptions(ids: stale, logger: logger)
            logger.info("removed the subscriptions of zones no longer followed", metadata: ["subscriptions": "\(stale.joined(separator: ", "))"])
        }
    }

    public func changeHints(logger: Logger) -> AsyncThrowingStream<ChangeHint, any Error> {
        let client = self.client
        let queryMemory = self.queryMemory
        let prefix = subscriptionPrefix
        return AsyncThrowingStream { continuation in
            let task = Task {
                var failures = 0
                while !Task.isCancelled {
                    let token: PushToken
                    do {
                        token = try await client.createAndRegisterPushToken(logger: logger)
                    } catch {
                        continuation.finish(throwing: error)
                        return
                    }
                    let courier = WebCourier(url: token.webcourierURL, trust: client.configuration.tlsTrust)
                    // Listening from now on: a change made before the token was registered was
                    // notified to nobody, so the watcher looks once more.
                    continuation.yield(ChangeHint(zone: nil, kind: .listening))
                    let registered = ContinuousClock.now
                    var answered = false
                    do {
                        while !Task.isCancelled {
                            let began = ContinuousClock.now
                            let notification = try await courier.poll()
                            if !answered {
                                answered = true
                                continuation.yield(ChangeHint(zone: nil, kind: .confirmed))
                            }
                            // Only CloudKit's own (`{"ck": …}`): a body without it (a proxy's
                            // page, `{}`) answered at once started a cycle each time.
                            if let notification, notification["ck"] != nil {
                                // A query subscription names a deleted record: it is tombstoned by
                                // the next pass, which a query could not bring before the next sweep.
                                if let deleted = Self.deletedRecord(in: notification, subscriptionPrefix: prefix) {
                                    queryMemory.noteDeletion(deleted)
                                }
                                continuation.yield(ChangeHint(zone: Self.zone(of: notification)))
                            }
                            // An answer sooner than a long poll's, empty or not: a courier (or a
                            // proxy before it) that does not hold the poll is asked again at most
                            // four times a second, as MistKit waits 250 ms, not at once for ever.
                            // One that answered every poll at once with a body (a page of HTML,
                            // `{}`) was asked in a loop, and each answer started a cycle.
                            try await Task.sleep(until: began + Self.leastCourierPoll)
                        }
                    } catch {
                        // Failures count in a row until a token's courier has answered and served
                        // a while: one that answered once and then failed at once made a new token
                        // every half second; one behind a proxy that cuts idle polls after tens
                        // of seconds still starts the count again.
                        failures = answered && ContinuousClock.now - registered > Self.healthyCourier ? 1 : failures + 1
                        if !Task.isCancelled {
                            guard failures <= 5 else {
                                try? await courier.shutdown()
                                continuation.finish(throwing: error)
                                return
                            }
                            logger.info("the web courier failed; getting a new push token", metadata: ["error": "\(error)", "failures": "\(failures)"])
                            try? await Task.sleep(for: .milliseconds(250 * (1 << min(failures, 7))))
                        }
                    }
                    try? await courier.shutdown()
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// Whether a listed subscription is this pipeline's: its ID is the prefix and the zone it
    /// watches, or the prefix, `_defaultZone.` and the record type its query watches, as
    /// `follow` names them. Beginning with the prefix is not enough: a pipeline whose name is
    /// this one's and more after a dot (`notes.archive` beside `notes`) has IDs that begin with
    /// it too, and taken for stale, its subscriptions were deleted and its push went quiet.
    static func isOurs(_ subscription: Subscription, prefix: String) -> Bool {
        guard let id = subscription.subscriptionID, id.hasPrefix(prefix) else { return false }
        let rest = String(id.dropFirst(prefix.count))
        if subscription.subscriptionType == "query", let type = subscription.recordType {
            return ExactName.same(rest, ZoneID.defaultZoneName + "." + type)
        }
        return subscription.zoneID.map { ExactName.same(rest, $0.zoneName) } ?? false
    }

    /// The least time between the starts of two polls of the courier.
    static let leastCourierPoll = Duration.milliseconds(250)
    /// How long a push token must have served, its courier having answered, before its
    /// courier's failure counts as the first.
    static let healthyCourier = Duration.seconds(10)

    /// The record a query subscription of this pipeline's says was deleted in `_defaultZone`
    /// (`ck.qry.fo` 3, its name in `rid`); nil for any other notification, another pipeline's
    /// subscription's or another zone's, or a name longer than `maxNotifiedNameBytes`.
    static func deletedRecord(in notification: JSONValue, subscriptionPrefix: String) -> String? {
        guard let query = notification["ck"]?["qry"], case .int(3)? = query["fo"],
            query["sid"]?.stringValue?.hasPrefix(subscriptionPrefix + ZoneID.defaultZoneName + ".") == true,
            (query["zid"]?.stringValue ?? ZoneID.defaultZoneName) == ZoneID.defaultZoneName,
            let name = query["rid"]?.stringValue, !name.isEmpty, name.utf8.count <= maxNotifiedNameBytes, !name.containsNUL
        else { return nil }
        return name
    }

    /// The longest record name a deletion's notification is taken with: Apple documents a
    /// record's name as 255 ASCII characters at most (`CKRecord.ID`), and the names of deletions
    /// heard of are kept (up to `QueryReadMemory.maxDeletions`) until a page carries them; a
    /// courier's answer of a megabyte a name held a megabyte each. A longer one is left to the
    /// next sweep, which tombstones the record as it would without push.
    static let maxNotifiedNameBytes = 1_024

    /// The zone a notification names, whatever block it uses (`fet`, `qry`, `met`); nil when it
    /// names none.
    static func zone(of notification: JSONValue) -> ZoneID? {
        for block in ["fet", "qry", "met"] {
            if let name = notification["ck"]?[block]?["zid"]?.stringValue {
                return ZoneID(zoneName: name, ownerRecordName: notification["ck"]?[block]?["zoid"]?.stringValue ?? ZoneID.defaultOwner)
            }
        }
        return nil
    }
}
