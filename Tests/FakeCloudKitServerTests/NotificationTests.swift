import CloudKitModel
import FakeCloudKit
import FakeCloudKitServer
import Foundation
import Testing

/// Zone subscriptions, push tokens and the web courier of the fake server: what `zonefeed watch`
/// will rely on, as strict as the field may be (lost, delayed and refused notifications).
@Suite struct NotificationTests {
    typealias Harness = FakeServerHarness

    /// `/device/1/{container}/{environment}/…`, where the live service serves the token calls.
    func device(_ server: Harness, _ operation: String, _ body: JSONValue) async throws -> Harness.Answer {
        let c = server.configuration
        let url =
            "http://127.0.0.1:\(server.port)/device/1/\(c.container)/\(c.environment)/\(operation)"
            + "?ckAPIToken=\(Harness.encode(Harness.apiToken))&ckWebAuthToken=\(Harness.encode(Harness.initialWebToken))"
        return try await server.send(url, body: body)
    }

    var apnsEnvironment: JSONValue { .string("development") }

    func zoneSubscription(_ id: String, zone: String) -> JSONValue {
        .object([
            "subscriptionType": .string("zone"), "subscriptionID": .string(id), "zoneID": .object(["zoneName": .string(zone)]),
            "notificationInfo": .object(["shouldSendContentAvailable": .bool(true)]),
        ])
    }

    func modify(_ server: Harness, _ operationType: String, _ subscription: JSONValue) async throws -> JSONValue {
        let answer = try await server.cloudKit(
            "subscriptions/modify",
            body: .object(["operations": .array([.object(["operationType": .string(operationType), "subscription": subscription])])]))
        #expect(answer.status == 200)
        return try #require(answer.json?["subscriptions"]?.arrayValue?.first)
    }

    /// A registered push token's courier URL.
    func courier(_ server: Harness) async throws -> String {
        let created = try await device(server, "tokens/create", .object(["apnsEnvironment": apnsEnvironment]))
        #expect(created.status == 200)
        let token = try #require(created.json?["apnsToken"]?.stringValue)
        let registered = try await device(server, "tokens/register", .object(["apnsEnvironment": apnsEnvironment, "apnsToken": .string(token)]))
        #expect(registered.status == 200)
        return try #require(created.json?["webcourierURL"]?.stringValue)
    }

    func addTag(_ server: Harness, _ name: String, to zone: String) async throws {
        try await server.admin(
            "records/add",
            .object([
                "zone": .string(zone),
                "records": .array([.object(["recordName": .string(name), "recordType": .string("Tag"), "fields": .object([:])])]),
            ]))
    }

    @Test func zoneSubscriptionsAreCreatedOnceListedAndDeleted() async throws {
        try await Harness.with { server in
            #expect(try await modify(server, "create", zoneSubscription("zonefeed.Zone01", zone: "Zone01"))["subscriptionID"]?.stringValue == "zonefeed.Zone01")
            #expect(try await modify(server, "create", zoneSubscription("zonefeed.Zone01", zone: "Zone01"))["serverErrorCode"]?.stringValue == "CONFLICT")
            #expect(try await modify(server, "create", zoneSubscription("zonefeed.Nope", zone: "Nope"))["serverErrorCode"]?.stringValue == "ZONE_NOT_FOUND")
            let database = JSONValue.object(["subscriptionType": .string("database"), "subscriptionID": .string("zonefeed.db")])
            #expect(try await modify(server, "create", database)["serverErrorCode"]?.stringValue == "BAD_REQUEST", "database subscriptions are refused")
            let listed = try await server.cloudKit("subscriptions/list", method: "GET")
            #expect(listed.json?["subscriptions"]?.arrayValue?.compactMap { $0["subscriptionID"]?.stringValue } == ["zonefeed.Zone01"])
            #expect(try await modify(server, "delete", .object(["subscriptionID": .string("zonefeed.Zone01")]))["deleted"]?.boolValue == true)
            #expect(try await server.cloudKit("subscriptions/list", method: "GET").json?["subscriptions"]?.arrayValue?.isEmpty == true)
        }
    }

    @Test func tokensAreServedUnderDeviceOnlyAndTheCourierDeliversEachChangeOnce() async throws {
        try await Harness.with { server in
            let documented = try await server.cloudKit("tokens/create", body: .object(["apnsEnvironment": apnsEnvironment]))
            #expect(documented.status == 405, "the documented /database/… path, as the live service answers it")
            try await server.admin("notifications", .object(["courierTimeoutMilliseconds": .int(300)]))
            _ = try await modify(server, "create", zoneSubscription("zonefeed.Zone01", zone: "Zone01"))
            let courier = try await courier(server)

            try await addTag(server, "T-1", to: "Zone01")
            try await addTag(server, "T-2", to: "Zone02")  // not subscribed
            let first = try await server.send(courier, method: "GET")
            #expect(first.status == 200)
            #expect(first.json?["ck"]?["fet"]?["sid"]?.stringValue == "zonefeed.Zone01", "\(String(decoding: first.bytes, as: UTF8.self))")
            let second = try await server.send(courier, method: "GET")
            #expect(second.status == 200 && second.bytes.isEmpty, "delivered once; nothing for the unsubscribed zone")
        }
    }

    @Test func notificationsCanBeDroppedDelayedAndTheCourierRefused() async throws {
        try await Harness.with { server in
            try await server.admin("notifications", .object(["courierTimeoutMilliseconds": .int(300)]))
            _ = try await modify(server, "create", zoneSubscription("zonefeed.Zone01", zone: "Zone01"))
            let courier = try await courier(server)

            try await server.admin("notifications", .object(["drop": .bool(true)]))
            try await addTag(server, "LOST", to: "Zone01")
            #expect(try await server.send(courier, method: "GET").bytes.isEmpty, "a dropped notification never comes")
            #expect(try await server.admin("state")["notifications"]?["dropped"]?.doubleValue == 1)

            try await server.admin(
                "notifications", .object(["drop": .bool(false), "delayMilliseconds": .int(500), "courierTimeoutMilliseconds": .int(15_000)]))
            let clock = ContinuousClock()
            let start = clock.now
            try await addTag(server, "LATE", to: "Zone01")
            // The poll may wait 15 s: a loaded machine (CI) must not turn a delay into a loss.
            let late = try await server.send(courier, method: "GET")
            #expect(!late.bytes.isEmpty && clock.now - start >= .milliseconds(450), "delivered, after the delay")

            try await server.admin("notifications", .object(["refuseCourier": .bool(true)]))
            #expect(try await server.send(courier, method: "GET").status == 401)
        }
    }
}
