import CloudKitModel
import CloudKitWebServices
import Foundation
import Testing

/// CloudKit takes at most 200 operations a request: a watch of more zones than that sent all
/// their subscriptions in one request, which was refused at every cycle, and push was never on.
@Suite struct SubscriptionBatchTests {
    @Test func subscriptionsAreMadeAndDeletedTwoHundredARequest() async throws {
        try await withServer { server, client in
            // As strict as the reference: more than 200 operations is refused whole.
            server.route { request in
                guard let json = request.body.withUnsafeBytes({ try? JSONValue(parsing: $0) }),
                    case .array(let operations)? = json["operations"]
                else { return .error(400, code: "BAD_REQUEST", reason: "no operations") }
                guard operations.count <= 200 else { return .error(400, code: "BAD_REQUEST", reason: "more than 200 operations") }
                let made = operations.map { operation -> String in
                    let id = operation["subscription"]?["subscriptionID"]?.stringValue ?? "?"
                    return #"{"subscriptionID":"\#(id)","subscriptionType":"zone"}"#
                }
                return .json(200, #"{"subscriptions":[\#(made.joined(separator: ","))]}"#)
            }
            let subscriptions = (0..<450).map {
                Subscription(subscriptionID: "zonefeed.notes.Zone\($0)", subscriptionType: "zone", zoneID: ZoneID(zoneName: "Zone\($0)"))
            }
            let made = try await client.createSubscriptions(subscriptions)
            #expect(made.map(\.subscriptionID) == subscriptions.map(\.subscriptionID), "every one, in order")
            #expect(server.requests.count == 3, "200, 200 and 50")
            let deleted = try await client.deleteSubscriptions(ids: subscriptions.prefix(201).compactMap(\.subscriptionID))
            #expect(deleted.count == 201)
            #expect(server.requests.count == 5)
        }
    }
}
