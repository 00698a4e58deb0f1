import CloudKitWebServices
import Foundation
import Testing

@Suite struct AuthenticationTests {
    /// `count` fetches, each answered with a new token: `rotated-1`, `rotated-2`, ….
    func fetch(_ client: CloudKitClient, from server: CannedServer, rotating count: Int) async throws {
        for i in 1...count {
            server.enqueue(.json(200, emptyPage, headers: [("X-Apple-CloudKit-Web-Auth-Token", "rotated-\(i)")]))
            _ = try await client.fetchRecordZoneChanges(zoneID: ZoneID(zoneName: "Notes"), syncToken: nil)
        }
    }

    @Test func tokensAreStrictlyPercentEncodedInTheQueryString() async throws {
        try await withServer { server, client in
            server.enqueue(.json(200, emptyPage))
            _ = try await client.fetchRecordZoneChanges(zoneID: ZoneID(zoneName: "Notes"), syncToken: nil)
            let request = try #require(server.requests.first)
            #expect(request.rawQueryValue("ckAPIToken") == "api%2BToken%2FWith%3DSpecials")
            #expect(request.rawQueryValue("ckWebAuthToken") == "web%2BAuth%2FToken%3D%3Done")
            #expect(!request.query.contains("+") && !request.query.contains("/"))
        }
    }

    @Test func rotatedTokenIsUsedNextEvenWhenItCameWithAnError() async throws {
        try await withServer { server, client in
            server.enqueue(
                .error(503, code: "TRY_AGAIN_LATER", headers: [("X-Apple-CloudKit-Web-Auth-Token", Secrets.rotatedToken)]),
                .json(200, emptyPage, headers: [("X-Apple-CloudKit-Web-Auth-Token", Secrets.newestToken)]),
                .json(200, emptyPage))
            _ = try await client.fetchRecordZoneChanges(zoneID: ZoneID(zoneName: "Notes"), syncToken: nil)
            _ = try await client.fetchRecordZoneChanges(zoneID: ZoneID(zoneName: "Notes"), syncToken: nil)
            let sent = server.requests.map { $0.rawQueryValue("ckWebAuthToken") }
            #expect(sent == [Secrets.webAuthToken, Secrets.rotatedToken, Secrets.newestToken].map(Secrets.strictlyEncoded))
            #expect(client.webAuthToken == Secrets.newestToken)
        }
    }

    /// An older saved token taken after a refusal (here a bare 401, as a proxy's) says nothing
    /// of how many requests the server takes at once: nothing is learned for later runs. It was
    /// taken for an overtaken token, and every later run went one request at a time. A newer
    /// one, which another process saved meanwhile, taken after the refusal, is what teaches it.
    @Test(arguments: [false, true])
    func onlyANewerTokenTakenAfterARefusalTeachesOneRequestAtATime(_ newer: Bool) async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let file = folder + "/token"
        try "newest-saved\nearlier=older-saved\n".write(toFile: file, atomically: true, encoding: .utf8)
        #expect(chmod(file, 0o600) == 0)
        try await withServer(configure: { $0.webAuthTokenFile = file }) { server, client in
            // Newer: another process sharing the file rotated the token on meanwhile.
            if newer { try "rotated-on\nearlier=newest-saved\nearlier=older-saved\n".write(toFile: file, atomically: true, encoding: .utf8) }
            #expect(chmod(file, 0o600) == 0)
            server.enqueue(.json(401, ""), .json(200, emptyPage))
            _ = try await client.fetchRecordZoneChanges(zoneID: ZoneID(zoneName: "Notes"), syncToken: "t")
            let sent = server.requests.map { $0.rawQueryValue("ckWebAuthToken") }
            #expect(sent == ["newest-saved", newer ? "rotated-on" : "older-saved"], "\(sent)")
        }
        let saved = try String(contentsOfFile: file, encoding: .utf8)
        #expect(saved.contains("requests=one-at-a-time") == newer, "\(saved)")
    }

    @Test func rotatedTokenIsSavedPrivatelyAndPreferredAtTheNextStart() async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let file = folder + "/state/notes.web-auth-token"

        let server = try await CannedServer.start()
        server.enqueue(.error(401, code: "AUTHENTICATION_FAILED", headers: [("X-Apple-CloudKit-Web-Auth-Token", Secrets.rotatedToken)]))
        let first = makeClient(server) { $0.webAuthTokenFile = file }
        await #expect(throws: CloudKitError.self) {
            _ = try await first.fetchRecordZoneChanges(zoneID: ZoneID(zoneName: "Notes"), syncToken: nil)
        }
        try await first.shutdown()

        let lines = try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(lines.first == Secrets.rotatedToken, "the newest token first")
        #expect(
            lines.dropFirst().allSatisfy { line in
                ["earlier=", "configured-token-sha256=", "requests=", "rotated-at=", "used-at="].contains { line.hasPrefix($0) }
            },
            "then only the file's keyed lines: \(lines.count) lines")
        #expect(!lines.contains(Secrets.webAuthToken), "the refused configured token is not kept")
        let mode = try #require(try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? NSNumber)
        #expect(mode.intValue & 0o777 == 0o600)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: folder + "/state")
        #expect(leftovers == ["notes.web-auth-token"], "no temporary file is left behind")

        // A new client configured with the old token starts with the saved one.
        server.enqueue(.json(200, emptyPage))
        let second = makeClient(server) { $0.webAuthTokenFile = file }
        _ = try await second.fetchRecordZoneChanges(zoneID: ZoneID(zoneName: "Notes"), syncToken: nil)
        try await second.shutdown()
        try await server.stop()
        #expect(server.requests.last?.rawQueryValue("ckWebAuthToken") == Secrets.strictlyEncoded(Secrets.rotatedToken))
    }

    @Test func theNewestOfManyRotatedTokensIsSavedWhenTheClientShutsDown() async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let file = folder + "/notes.web-auth-token"
        let server = try await CannedServer.start()
        let client = makeClient(server) { $0.webAuthTokenFile = file }
        try await fetch(client, from: server, rotating: 40)
        try await client.shutdown()
        try await server.stop()
        let lines = try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(lines.first == "rotated-40")
        #expect(lines.dropFirst().prefix(3) == ["earlier=rotated-39", "earlier=rotated-38", "earlier=rotated-37"])
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder) == ["notes.web-auth-token"])
    }

    /// A rotation header far longer than a token (a proxy's, or a hostile server's) is not
    /// taken: saved, it made the token file one that the next run refuses to read ("a line of
    /// 20000 bytes ... it is not a token file"), a stop that only a person could end. The
    /// requests go on with the token before it.
    @Test func aRotatedTokenTooLongToBeOneIsNotKept() async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let file = folder + "/notes.web-auth-token"
        let server = try await CannedServer.start()
        let client = makeClient(server) { $0.webAuthTokenFile = file }
        let long = String(repeating: "x", count: 20_000)
        server.enqueue(
            .json(200, emptyPage, headers: [("X-Apple-CloudKit-Web-Auth-Token", "rotated-1")]),
            .json(200, emptyPage, headers: [("X-Apple-CloudKit-Web-Auth-Token", long)]),
            .json(200, emptyPage))
        for _ in 1...3 { _ = try await client.fetchRecordZoneChanges(zoneID: ZoneID(zoneName: "Notes"), syncToken: nil) }
        try await client.shutdown()
        #expect(server.requests.last?.rawQueryValue("ckWebAuthToken") == Secrets.strictlyEncoded("rotated-1"))

        // The next run reads the file and starts with the last token that was one.
        server.enqueue(.json(200, emptyPage))
        let next = makeClient(server) { $0.webAuthTokenFile = file }
        var failure: (any Error)?
        do {
            _ = try await next.fetchRecordZoneChanges(zoneID: ZoneID(zoneName: "Notes"), syncToken: nil)
        } catch {
            failure = error
        }
        try await next.shutdown()
        try await server.stop()
        #expect(failure == nil, "the next run could not start: \(String(describing: failure).prefix(300))")
        #expect(server.requests.last?.rawQueryValue("ckWebAuthToken") == Secrets.strictlyEncoded("rotated-1"))
        #expect(try String(contentsOfFile: file, encoding: .utf8).utf8.count < 1_000)
    }

    /// A wrong API token: CloudKit answers `AUTHENTICATION_FAILED` whatever web auth token comes
    /// with it, so each saved token is refused in turn. The file keeps every token, as it was,
    /// and once the API token is put right the next run starts from the newest without anyone
    /// signing in; where each refusal was saved, it kept only the oldest, long retired.
    @Test func aWrongAPITokenLeavesTheSavedTokensAsTheyWere() async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let file = folder + "/notes.web-auth-token"
        let server = try await CannedServer.start()
        let first = makeClient(server) { $0.webAuthTokenFile = file }
        try await fetch(first, from: server, rotating: 3)
        try await first.shutdown()
        // As the next day's run finds it: last used an hour ago (an answer then marks it used).
        let saved = try String(contentsOfFile: file, encoding: .utf8)
        let hourAgo = Int(Date().timeIntervalSince1970) - 3_600
        let before = saved.split(separator: "\n").map { $0.hasPrefix("used-at=") ? "used-at=\(hourAgo)" : String($0) }.joined(separator: "\n") + "\n"
        #expect(before != saved && before.contains("used-at=\(hourAgo)"), "\(saved)")
        try before.write(toFile: file, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: file)
        #expect(before.hasPrefix("rotated-3\nearlier=rotated-2\nearlier=rotated-1\nearlier=\(Secrets.webAuthToken)\n"), "\(before)")

        server.always(.error(401, code: "AUTHENTICATION_FAILED"))
        let wrongAPIToken = makeClient(server) { $0.webAuthTokenFile = file }
        let error = try await #require(throws: CloudKitError.self) {
            _ = try await wrongAPIToken.fetchRecordZoneChanges(zoneID: ZoneID(zoneName: "Notes"), syncToken: nil)
        }
        try await wrongAPIToken.shutdown()
        #expect(error.code == .authenticationFailed)
        let tried = server.requests.suffix(4).map { $0.rawQueryValue("ckWebAuthToken") }
        #expect(tried == ["rotated-3", "rotated-2", "rotated-1", Secrets.strictlyEncoded(Secrets.webAuthToken)], "each saved token tried once")
        #expect(try String(contentsOfFile: file, encoding: .utf8) == before, "the file as it was")

        server.always(.json(200, emptyPage))
        let fixed = makeClient(server) { $0.webAuthTokenFile = file }
        _ = try await fixed.fetchRecordZoneChanges(zoneID: ZoneID(zoneName: "Notes"), syncToken: nil)
        try await fixed.shutdown()
        try await server.stop()
        #expect(server.requests.last?.rawQueryValue("ckWebAuthToken") == "rotated-3", "the next run starts from the newest token")
    }

    @Test func rejectedTokenIsNotRetriedAndTheErrorSaysHowToFixIt() async throws {
        let logs = LogRecorder()
        try await withServer(logs: logs) { server, client in
            // The server echoing a token back must not leak it either.
            server.always(.error(401, code: "AUTHENTICATION_FAILED", reason: "token \(Secrets.webAuthToken) is not valid"))
            let error = try await #require(throws: CloudKitError.self) {
                _ = try await client.fetchRecordZoneChanges(zoneID: ZoneID(zoneName: "Notes"), syncToken: nil)
            }
            #expect(server.requests.count == 1, "401 is never retried")
            #expect(error.code == .authenticationFailed)
            #expect(error.httpStatus == 401)
            #expect(error.isAuthenticationFailure)
            let text = error.description
            #expect(
                text.contains(
                    "web auth token rejected (AUTHENTICATION_FAILED): sign in again (zonefeed login, or a new CLOUDKIT_WEB_AUTH_TOKEN; see README: signing in)")
            )
            #expect(Secrets.leaked(in: text).isEmpty, "\(text)")
            #expect(!text.contains("ckAPIToken") && !text.contains("?"))
        }
        #expect(Secrets.leaked(in: logs.text).isEmpty)
    }

    @Test func signInRequiredKeepsTheRedirectURLOutOfTheText() async throws {
        try await withServer { server, client in
            server.enqueue(
                .json(
                    421, #"{"uuid":"u","serverErrorCode":"AUTHENTICATION_REQUIRED","reason":"sign in","redirectURL":"https://idmsa.example.invalid/login?x=1"}"#
                ))
            let error = try await #require(throws: CloudKitError.self) { _ = try await client.caller() }
            #expect(error.code == .authenticationRequired)
            #expect(error.redirectURL == "https://idmsa.example.invalid/login?x=1")
            #expect(!error.description.contains("idmsa"))
            #expect(error.description.contains("CLOUDKIT_WEB_AUTH_TOKEN"))
            #expect(server.requests.count == 1)
        }
    }

    @Test func noSecretAppearsInAnyErrorOrLogLine() async throws {
        let logs = LogRecorder()
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try await withServer(
            logs: logs,
            configure: {
                $0.webAuthTokenFile = folder + "/token"
                $0.maxResponseBytes = 200
                $0.retry.maxAttempts = 2
            }
        ) { server, client in
            let rotate = [("X-Apple-CloudKit-Web-Auth-Token", Secrets.rotatedToken)]
            let replies: [CannedServer.Reply] = [
                .error(400, code: "BAD_REQUEST", reason: "bad \(Secrets.apiToken)", headers: rotate),
                .error(403, code: "ACCESS_DENIED", reason: Secrets.strictlyEncoded(Secrets.rotatedToken)),
                // A proxy that echoes what it was sent in the error's code and uuid.
                .json(400, #"{"serverErrorCode":"BAD_\#(Secrets.apiToken)","uuid":"\#(Secrets.rotatedToken)","reason":"r"}"#),
                .error(404, code: "ZONE_NOT_FOUND"),
                .error(418, code: "SOMETHING_NEW"),
                .json(200, String(repeating: " ", count: 300)),
                .json(200, "<html>\(Secrets.rotatedToken)</html>"),
            ]
            for reply in replies {
                server.always(reply)
                let error = try await #require(throws: CloudKitError.self) {
                    _ = try await client.fetchRecordZoneChanges(zoneID: ZoneID(zoneName: "Notes"), syncToken: "t")
                }
                #expect(Secrets.leaked(in: "\(error)").isEmpty, "\(error)")
                #expect(Secrets.leaked(in: error.reason ?? "").isEmpty, "\(error)")
                #expect(!"\(error)".contains("127.0.0.1"), "only the path is printed")
            }
            #expect(!"\(client.configuration)".contains(Secrets.apiToken))
        }
        #expect(Secrets.leaked(in: logs.text).isEmpty, "\(logs.text)")
    }

    /// A server's words are quoted in logs, a zone's last_error, rejects and `zonefeed status`:
    /// a reason of megabytes (an error body may be as large as a page) is cut to a sentence's
    /// length there, in a failed request's error and in a page's error entry alike, and a
    /// secret in it is not quoted.
    @Test func aServersReasonOfMegabytesIsCutBeforeItIsQuoted() async throws {
        let logs = LogRecorder()
        try await withServer(logs: logs, configure: { $0.retry.maxAttempts = 1 }) { server, client in
            let long = Secrets.apiToken + String(repeating: "blah ", count: 400_000) + Secrets.apiToken
            let quotedAtMost = CloudKitClient.quotedServerTextLength + 100
            server.always(.error(400, code: "BAD_REQUEST", reason: long))
            let error = try await #require(throws: CloudKitError.self) {
                _ = try await client.fetchRecordZoneChanges(zoneID: ZoneID(zoneName: "Notes"), syncToken: "t")
            }
            let reason = try #require(error.reason)
            #expect(reason.count <= quotedAtMost && reason.hasSuffix("… (cut; \(long.utf8.count) bytes in all)"), "\(reason.prefix(2_000))")
            #expect("\(error)".count < 2 * quotedAtMost, "\("\(error)".prefix(3_000))")

            server.always(.json(200, #"{"records":[{"recordName":"a","serverErrorCode":"BAD","reason":"\#(long)"}],"syncToken":"s","moreComing":false}"#))
            let page = try await client.fetchRecordZoneChanges(zoneID: ZoneID(zoneName: "Notes"), syncToken: "t")
            guard case .error(let entry) = try #require(page.records.first) else {
                Issue.record("\(page.records)")
                return
            }
            #expect(entry.reason.map { $0.count <= quotedAtMost && $0.contains("cut;") } == true, "\(entry.reason?.prefix(2_000) ?? "")")
            #expect(Secrets.leaked(in: "\(error) \(entry)").isEmpty)
        }
        #expect(logs.text.count < 100_000, "\(logs.text.count) characters logged")
        #expect(Secrets.leaked(in: logs.text).isEmpty)
    }

    /// A proxy echoing a long token over and over: redacted, the text shrinks below the length
    /// quoted, and a token cut where the text was first cut must not be left there in part.
    @Test func aTokenEchoedUntilTheTextIsCutIsNotQuotedInPart() async throws {
        let long = "long+Token/" + String(repeating: "Q", count: 290)
        try await withServer(configure: { $0.webAuthToken = long }) { server, client in
            server.always(.error(400, code: "BAD_REQUEST", reason: String(repeating: long, count: 100)))
            let error = try await #require(throws: CloudKitError.self) {
                _ = try await client.fetchRecordZoneChanges(zoneID: ZoneID(zoneName: "Notes"), syncToken: "t")
            }
            #expect(!"\(error)".contains("long+Token/QQ"), "\(error)")
            #expect("\(error)".contains("<redacted><redacted>"))
        }
    }

    /// A page's error entries (a record's, a zone's) carry the server's words too, and are
    /// quoted in logs, a zone's last_error and rejects: scrubbed as an error body is.
    @Test func noSecretAppearsInAPagesErrorEntries() async throws {
        let logs = LogRecorder()
        try await withServer(logs: logs) { server, client in
            let rotate = [("X-Apple-CloudKit-Web-Auth-Token", Secrets.rotatedToken)]
            // A proxy that echoes what it was sent, in each text of each error entry.
            let (code, reason, uuid) = ("BAD_\(Secrets.apiToken)", "echoed \(Secrets.rotatedToken)", Secrets.strictlyEncoded(Secrets.apiToken))
            let echoed = #""serverErrorCode":"\#(code)","reason":"\#(reason)","uuid":"\#(uuid)""#
            server.always(.json(200, #"{"records":[{"recordName":"a",\#(echoed)}],"syncToken":"s","moreComing":false}"#, headers: rotate))
            let page = try await client.fetchRecordZoneChanges(zoneID: ZoneID(zoneName: "Notes"), syncToken: "t")
            guard case .error(let entry) = try #require(page.records.first) else {
                Issue.record("\(page.records)")
                return
            }
            #expect(entry.serverErrorCode == "BAD_<redacted>" && entry.reason == "echoed <redacted>" && entry.uuid == "<redacted>", "\(entry)")
            #expect(entry.recordName == "a")

            server.always(.json(200, #"{"records":[{"recordName":"a",\#(echoed)}]}"#))
            let query = try await client.queryRecords(recordType: "Note")
            #expect(Secrets.leaked(in: "\(query.records)").isEmpty, "\(query.records)")

            server.always(.json(200, #"{"zones":[{"zoneID":{"zoneName":"Notes"},\#(echoed)}],"syncToken":"d","moreComing":false}"#))
            let zones = try await client.fetchDatabaseChanges(syncToken: nil)
            #expect(zones.zones.first?.reason == "echoed <redacted>" && zones.zones.first?.serverErrorCode == "BAD_<redacted>", "\(zones)")

            server.always(.json(200, #"{"zones":[{\#(echoed)}]}"#))
            #expect(try await client.listZones().isEmpty)

            server.always(.json(200, #"{"subscriptions":[{"subscriptionID":"zonefeed.notes.Zone01",\#(echoed)}]}"#))
            let made = try await client.createSubscriptions([Subscription(subscriptionID: "zonefeed.notes.Zone01", subscriptionType: "zone")])
            #expect(made.first?.reason == "echoed <redacted>" && made.first?.serverErrorCode == "BAD_<redacted>", "\(made)")
        }
        #expect(logs.text.contains("zones/list returned a zone error entry"), "\(logs.text)")
        #expect(Secrets.leaked(in: logs.text).isEmpty, "\(logs.text)")
    }
}
