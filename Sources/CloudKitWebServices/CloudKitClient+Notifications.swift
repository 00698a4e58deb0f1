import Foundation
import Logging
import NIOHTTP1

// Zone subscriptions and push tokens (field-notes §1): what `zonefeed watch` needs to hear of
// changes as they happen. The web courier is long-polled by `WebCourier`, on a client of its own.
extension CloudKitClient {
    /// `GET subscriptions/list`: the subscriptions of the database (of this user).
    public func listSubscriptions(logger: Logger? = nil) async throws -> [Subscription] {
        try await send(SubscriptionsResponse.self, operation: "subscriptions/list", method: .GET, body: nil, logger: logger).subscriptions
    }

    /// `POST subscriptions/modify` with `create` for each subscription; one result per
    /// subscription, in order: the subscription, or its per-item error (`serverErrorCode`).
    public func createSubscriptions(_ subscriptions: [Subscription], logger: Logger? = nil) async throws -> [Subscription] {
        try await modifySubscriptions(subscriptions.map { ("create", $0.json) }, logger: logger)
    }

    /// `POST subscriptions/modify` with `delete` for each ID.
    public func deleteSubscriptions(ids: [String], logger: Logger? = nil) async throws -> [Subscription] {
        try await modifySubscriptions(ids.map { ("delete", .object(["subscriptionID": .string($0)])) }, logger: logger)
    }

    /// Sent `operationsPerRequest` at a time: Apple takes no more in one request (reference
    /// §7), and a watch of more zones than that never had its subscriptions made.
    func modifySubscriptions(_ operations: [(String, JSONValue)], logger: Logger?) async throws -> [Subscription] {
        var results: [Subscription] = []
        for start in stride(from: 0, to: operations.count, by: Self.operationsPerRequest) {
            let chunk = operations[start..<min(operations.count, start + Self.operationsPerRequest)]
            let body = JSONValue.object([
                "operations": .array(chunk.map { .object(["operationType": .string($0.0), "subscription": $0.1]) })
            ])
            results += try await send(SubscriptionsResponse.self, operation: "subscriptions/modify", method: .POST, body: body, logger: logger)
                .subscriptions
        }
        return results
    }

    /// The most operations CloudKit takes in one request.
    static let operationsPerRequest = 200

    /// `POST /device/1/…/tokens/create` then `tokens/register`: a push token whose notifications
    /// the web courier at `courierURL` hands out. A secret: never print either.
    public func createAndRegisterPushToken(logger: Logger? = nil) async throws -> PushToken {
        let apnsEnvironment = configuration.environment == .production ? "production" : "development"
        let created = try await send(
            PushToken.self, operation: "tokens/create", method: .POST, scope: .device,
            body: .object(["apnsEnvironment": .string(apnsEnvironment)]), logger: logger)
        guard Self.isCourierAddress(created.webcourierURL, baseURL: configuration.baseURL) else {
            // Never the address: it holds the push token.
            throw CloudKitError(
                code: .malformedResponse,
                reason: "tokens/create answered a webcourierURL that is not an https:// address (nor one on this machine or the "
                    + "baseURL's host); it is not polled, and changes are found by polling: check that baseURL points at CloudKit Web "
                    + "Services",
                operation: "tokens/create")
        }
        _ = try await send(
            JSONValue.self, operation: "tokens/register", method: .POST, scope: .device,
            body: .object(["apnsEnvironment": .string(apnsEnvironment), "apnsToken": .string(created.apnsToken)]), logger: logger)
        return created
    }
}

extension CloudKitClient {
    /// Whether an answer's `webcourierURL` may be polled: an `https://` address, or an
    /// `http://` one on this machine or on the baseURL's own host and port (a fake server). Its
    /// notifications are taken as deletions, and it is polled four times a second: any scheme
    /// the HTTP client takes (`http+unix://` to a local socket, plain `http://` to an address
    /// inside the network) was polled as the server said.
    static func isCourierAddress(_ address: String, baseURL: String) -> Bool {
        guard let url = URLComponents(string: address), let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased(),
            !host.isEmpty, url.user == nil, url.password == nil
        else { return false }
        if scheme == "https" { return true }
        guard scheme == "http" else { return false }
        if ["127.0.0.1", "localhost", "::1", "[::1]"].contains(host) { return true }
        guard let base = URLComponents(string: baseURL), base.scheme?.lowercased() == "http", base.host?.lowercased() == host else { return false }
        return base.port == url.port
    }

    /// The host (and port) of an address, for a message: never its path or query, which may
    /// hold a secret.
    static func hostOnly(of address: String) -> String {
        guard let url = URLComponents(string: address), let host = url.host, !host.isEmpty else { return "(an address without a host)" }
        return url.port.map { "\(host):\($0)" } ?? host
    }
}

/// A subscription as CloudKit Web Services sends and answers it. zonefeed makes silent zone
/// subscriptions (`shouldSendContentAvailable` only: any other key makes the push loud).
public struct Subscription: Sendable, Hashable, Decodable {
    public var subscriptionID: String?
    public var subscriptionType: String?
    public var zoneID: ZoneID?
    /// A query subscription's record type (`query.recordType`) and what fires it.
    public var recordType: String?
    public var firesOn: [String]?
    /// Set when the server refused this item.
    public var serverErrorCode: String?
    public var reason: String?

    public init(subscriptionID: String?, subscriptionType: String?, zoneID: ZoneID? = nil) {
        self.subscriptionID = subscriptionID
        self.subscriptionType = subscriptionType
        self.zoneID = zoneID
    }

    enum CodingKeys: String, CodingKey { case subscriptionID, subscriptionType, zoneID, query, firesOn, serverErrorCode, reason }
    enum QueryKeys: String, CodingKey { case recordType }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        subscriptionID = try c.decodeIfPresent(String.self, forKey: .subscriptionID)
        subscriptionType = try c.decodeIfPresent(String.self, forKey: .subscriptionType)
        zoneID = try c.decodeIfPresent(ZoneID.self, forKey: .zoneID)
        if c.contains(.query), try !c.decodeNil(forKey: .query) {
            recordType = try c.nestedContainer(keyedBy: QueryKeys.self, forKey: .query).decodeIfPresent(String.self, forKey: .recordType)
        }
        firesOn = try c.decodeIfPresent([String].self, forKey: .firesOn)
        serverErrorCode = try c.decodeIfPresent(String.self, forKey: .serverErrorCode)
        reason = try c.decodeIfPresent(String.self, forKey: .reason)
    }

    /// A silent zone subscription with a stable ID.
    public static func zone(_ zoneID: ZoneID, id: String) -> Subscription {
        Subscription(subscriptionID: id, subscriptionType: "zone", zoneID: zoneID)
    }

    /// A silent query subscription on every record of `recordType` in the `_defaultZone`, fired
    /// by its creations, updates and deletions: a notification names the record and what
    /// happened to it.
    public static func query(recordType: String, id: String) -> Subscription {
        var subscription = Subscription(subscriptionID: id, subscriptionType: "query")
        subscription.recordType = recordType
        subscription.firesOn = ["create", "update", "delete"]
        return subscription
    }

    var json: JSONValue {
        var members: [String: JSONValue] = ["notificationInfo": .object(["shouldSendContentAvailable": .bool(true)])]
        if let subscriptionID { members["subscriptionID"] = .string(subscriptionID) }
        if let subscriptionType { members["subscriptionType"] = .string(subscriptionType) }
        if let zoneID { members["zoneID"] = CloudKitClient.requestJSON(zoneID) }
        if let recordType { members["query"] = .object(["recordType": .string(recordType)]) }
        if let firesOn { members["firesOn"] = .array(firesOn.map { .string($0) }) }
        return .object(members)
    }
}

struct SubscriptionsResponse: Decodable {
    var subscriptions: [Subscription]
}

/// What `tokens/create` answers: the push token and the courier URL that delivers its
/// notifications. Both are secrets (whoever has them reads this user's change hints).
public struct PushToken: Sendable, Decodable {
    public var apnsToken: String
    public var apnsEnvironment: String?
    public var webcourierURL: String
}
