import CloudKitModel
import FakeCloudKit
import FakeCloudKitServer
import Foundation
import Testing

private typealias Harness = FakeServerHarness

/// The fake server as strict as the field: tokens good for a short window, latency with jitter,
/// and throttling when too many requests are in flight.
@Suite struct StrictServerTests {
    static func configuration(
        tokenWindow: Int? = nil, retirement: FakeCloudKitServer.Configuration.TokenRetirement = .onUse,
        latency: Duration = .zero, jitter: Duration = .zero, maxInFlight: Int? = nil
    ) -> FakeCloudKitServer.Configuration {
        var configuration = Harness.configuration()
        configuration.tokenWindow = tokenWindow
        configuration.tokenRetirement = retirement
        configuration.latency = latency
        configuration.jitter = jitter
        configuration.maxInFlight = maxInFlight
        return configuration
    }

    static func traffic(_ server: FakeServerHarness) async throws -> [String: Int64] {
        let state = try await server.admin("state")
        guard case .object(let members)? = state["traffic"] else { return [:] }
        return members.compactMapValues { if case .int(let n) = $0 { return n } else { return nil } }
    }

    @Test func aTokenWindowOfTwoAcceptsOnlyTheNewestTwoAndRetiresTheConfiguredToken() async throws {
        try await Harness.with(Self.configuration(tokenWindow: 2)) { server in
            let first = try #require(try await server.cloudKit("zones/list", method: "GET").rotatedToken)
            #expect(try await server.cloudKit("zones/list", method: "GET").status == 200, "the configured token until a rotated one is used")
            let second = try #require(try await server.cloudKit("zones/list", method: "GET", webAuthToken: first).rotatedToken)
            #expect(try await server.cloudKit("zones/list", method: "GET").status == 401, "retired once a rotated one was used")
            let third = try #require(try await server.cloudKit("zones/list", method: "GET", webAuthToken: second).rotatedToken)
            #expect(try await server.cloudKit("zones/list", method: "GET", webAuthToken: first).status == 401, "three tokens ago")
            #expect(try await server.cloudKit("zones/list", method: "GET", webAuthToken: second).status == 200, "the one before the newest")
            _ = third
            #expect(try await Self.traffic(server)["staleTokenRefusals"] == 2)
        }
    }

    @Test func aTokenWhoseSuccessorsWereNeverUsedStaysGood() async throws {
        try await Harness.with(Self.configuration(tokenWindow: 1)) { server in
            let saved = try #require(try await server.cloudKit("zones/list", method: "GET").rotatedToken)
            // A client killed while each answer was on its way never used the tokens they carried.
            for _ in 0..<3 { #expect(try await server.cloudKit("zones/list", method: "GET", webAuthToken: saved).status == 200) }
            let next = try #require(try await server.cloudKit("zones/list", method: "GET", webAuthToken: saved).rotatedToken)
            #expect(try await server.cloudKit("zones/list", method: "GET", webAuthToken: next).status == 200)
            #expect(try await server.cloudKit("zones/list", method: "GET", webAuthToken: saved).status == 401, "a newer token was used")
        }
    }

    @Test func retiredOnIssueOnlyTheNewestIssuedAreGoodAnsweredOrNot() async throws {
        try await Harness.with(Self.configuration(tokenWindow: 2, retirement: .onIssue)) { server in
            let saved = try #require(try await server.cloudKit("zones/list", method: "GET").rotatedToken)
            #expect(try await server.cloudKit("zones/list", method: "GET", webAuthToken: saved).status == 200, "the newest")
            #expect(try await server.cloudKit("zones/list", method: "GET", webAuthToken: saved).status == 200, "the one before the newest")
            #expect(try await server.cloudKit("zones/list", method: "GET", webAuthToken: saved).status == 401, "two newer ones were issued, though never used")
        }
    }

    @Test func withoutAWindowEveryIssuedTokenStaysGood() async throws {
        try await Harness.with(Self.configuration()) { server in
            let first = try #require(try await server.cloudKit("zones/list", method: "GET").rotatedToken)
            for _ in 0..<30 { _ = try await server.cloudKit("zones/list", method: "GET", webAuthToken: first) }
            #expect(try await server.cloudKit("zones/list", method: "GET", webAuthToken: first).status == 200)
        }
    }

    // Latencies of seconds: the four requests are sent at once, but on a loaded machine they
    // can reach the server a few hundred milliseconds apart, and each must still be in flight
    // when the last arrives.
    @Test func latencyDelaysEveryAnswerAndOverlappingRequestsAreCounted() async throws {
        try await Harness.with(Self.configuration(latency: .seconds(3), jitter: .milliseconds(20))) { server in
            let started = ContinuousClock.now
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<4 { group.addTask { try await server.cloudKit("zones/list", method: "GET").status } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            let elapsed = ContinuousClock.now - started
            #expect(statuses == [200, 200, 200, 200])
            #expect(elapsed >= .milliseconds(2_980), "\(elapsed)")
            let traffic = try await Self.traffic(server)
            #expect(traffic["peakInFlight"] == 4, "the four waited their latency at the same time")
            #expect(traffic["overlapped"] == 3)
            try await server.admin("stats/reset")
            #expect(try await Self.traffic(server)["requests"] == 0)
            // The connections that carried the four are counted again from their next request.
            #expect(try await server.cloudKit("zones/list", method: "GET").status == 200)
            let after = try await Self.traffic(server)
            #expect(after["requests"] == 1 && after["connections"] == 1, "\(after)")
        }
    }

    @Test func requestsBeyondTheLimitInFlightAreThrottled() async throws {
        try await Harness.with(Self.configuration(latency: .seconds(3), maxInFlight: 2)) { server in
            let answers = try await withThrowingTaskGroup(of: FakeServerHarness.Answer.self) { group in
                for _ in 0..<4 { group.addTask { try await server.cloudKit("zones/list", method: "GET") } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(answers.filter { $0.status == 200 }.count == 2)
            let throttled = answers.filter { $0.status == 429 }
            #expect(throttled.count == 2)
            #expect(throttled.allSatisfy { $0.json?["serverErrorCode"]?.stringValue == "THROTTLED" && $0.json?["retryAfter"] != nil })
            #expect(try await Self.traffic(server)["throttled"] == 2)
        }
    }
}
