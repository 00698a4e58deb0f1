import AsyncHTTPClient
import CloudKitModel
import FakeCloudKitServer
import Foundation
import Testing

/// The fake's browser sign-in: the 421's `redirectURL` is its own page, which signs the fake user
/// in and sends the browser to the sign-in callback with a new token; and sessions that end.
@Suite struct SignInTests {
    typealias Harness = FakeServerHarness

    static let callback = "http://127.0.0.1:9/callback?from=fake"

    static func configuration(sessionLifetime: Duration? = nil, longSessionLifetime: Duration? = nil) -> FakeCloudKitServer.Configuration {
        var configuration = Harness.configuration()
        configuration.signIn = .init(callbackURL: callback, sessionLifetime: sessionLifetime, longSessionLifetime: longSessionLifetime)
        return configuration
    }

    /// Submits the sign-in form as a browser does, without following the 303: its `Location`.
    static func submit(_ server: Harness, _ form: String) async throws -> (status: Int, location: String?) {
        let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: .init(redirectConfiguration: .disallow))
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(server.port)/signin")
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        request.body = .bytes(Array(form.utf8))
        do {
            let response = try await client.execute(request, timeout: .seconds(120))
            _ = try await response.body.collect(upTo: 1 << 20)
            try await client.shutdown()
            return (Int(response.status.code), response.headers.first(name: "Location"))
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    /// The token a callback address carries.
    static func token(in location: String?) -> String? {
        guard let location, let query = location.split(separator: "?", maxSplits: 1).last else { return nil }
        for pair in query.split(separator: "&") where pair.hasPrefix("ckWebAuthToken=") {
            return String(pair.dropFirst("ckWebAuthToken=".count)).removingPercentEncoding
        }
        return nil
    }

    @Test func aRequestWithoutATokenIsSentToTheServersOwnSignInPage() async throws {
        try await Harness.with(Self.configuration()) { server in
            let required = try await server.cloudKit("users/caller", database: "public", method: "GET", webAuthToken: nil)
            #expect(required.status == 421)
            let address = try #require(required.json?["redirectURL"]?.stringValue)
            #expect(address.hasPrefix("http://127.0.0.1:\(server.port)/signin"), "built from the address the client reached, on any port")
            let page = try await server.send(address, method: "GET")
            let html = String(decoding: page.bytes, as: UTF8.self)
            #expect(page.status == 200)
            #expect(page.headers["content-type"]?.hasPrefix("text/html") == true)
            for control in [#"id="keep-signed-in""#, #"id="sign-in""#, #"id="cancel""#, "Keep me signed in"] {
                #expect(html.contains(control), "\(control)")
            }
        }
    }

    @Test func signingInSendsTheBrowserToTheCallbackWithATokenTheServerAccepts() async throws {
        try await Harness.with(Self.configuration()) { server in
            let (status, location) = try await Self.submit(server, "keep=1&action=sign-in")
            #expect(status == 303)
            #expect(location?.hasPrefix(Self.callback + "&ckWebAuthToken=") == true, "\(location ?? "no Location")")
            let token = try #require(Self.token(in: location))
            #expect(!(location ?? "").contains("+"), "the token is percent-encoded on the callback")
            let caller = try await server.cloudKit("users/caller", database: "public", method: "GET", webAuthToken: token)
            #expect(caller.status == 200)
            #expect(caller.rotatedToken != nil)
        }
    }

    @Test func cancelAndRefusalComeBackToTheCallbackWithoutAToken() async throws {
        try await Harness.with(Self.configuration()) { server in
            let cancelled = try await Self.submit(server, "action=cancel")
            #expect(cancelled.status == 303)
            #expect(cancelled.location == Self.callback + "&error=cancelled")

            let answer = try await server.admin("auth/sign-in", .object(["refuse": .bool(true), "callback": .string("http://127.0.0.1:9/cb")]))
            #expect(answer["refuse"] == .bool(true))
            let refused = try await Self.submit(server, "action=sign-in")
            #expect(refused.location == "http://127.0.0.1:9/cb?error=refused")
        }
    }

    @Test func aSessionEndsItsLifetimeAfterSignInHoweverOftenItsTokenRotates() async throws {
        // An hour, of which the server is told how much has passed: no test waits it out, and
        // no load on the machine ends a session before the test means it to.
        try await Harness.with(Self.configuration(sessionLifetime: .seconds(3600))) { server in
            let short = try #require(Self.token(in: try await Self.submit(server, "action=sign-in").location))
            let kept = try #require(Self.token(in: try await Self.submit(server, "keep=1&action=sign-in").location))
            var token = short
            for _ in 0..<3 {
                let answer = try await server.cloudKit("users/caller", database: "public", method: "GET", webAuthToken: token)
                #expect(answer.status == 200)
                token = try #require(answer.rotatedToken)
            }
            let early = try await server.admin("auth/sign-in", .object(["elapseSeconds": .int(3000)]))
            #expect(early["elapsedSeconds"] == .int(3000))
            let before = try await server.cloudKit("users/caller", database: "public", method: "GET", webAuthToken: token)
            #expect(before.status == 200, "50 minutes into an hour's session")
            let rotated = try #require(before.rotatedToken)

            _ = try await server.admin("auth/sign-in", .object(["elapseSeconds": .int(600)]))
            // The rotated token is the short session's, which has ended: 421 and a way to sign in.
            let ended = try await server.cloudKit("users/caller", database: "public", method: "GET", webAuthToken: rotated)
            #expect(ended.status == 421)
            #expect(ended.json?["serverErrorCode"]?.stringValue == "AUTHENTICATION_REQUIRED")
            #expect(ended.json?["redirectURL"]?.stringValue?.contains("/signin") == true)
            #expect(ended.rotatedToken == nil)
            // So is the configured token's, which began with the server.
            let configured = try await server.cloudKit("users/caller", database: "public", method: "GET")
            #expect(configured.status == 421)
            // "Keep me signed in" has no lifetime here: still good.
            let long = try await server.cloudKit("users/caller", database: "public", method: "GET", webAuthToken: kept)
            #expect(long.status == 200)
            let counts = try await server.admin("auth/sign-in", .object([:]))
            #expect(counts["endedSessionRefusals"] == .int(2))
            let refusal = await #expect(throws: Harness.HarnessError.self) {
                try await server.admin("auth/sign-in", .object(["elapseSeconds": .int(-1)]))
            }
            #expect(refusal?.description.contains("elapseSeconds must be from 0") == true, "\(String(describing: refusal))")
        }
    }
}
