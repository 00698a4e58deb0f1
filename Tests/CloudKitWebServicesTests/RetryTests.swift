import CloudKitWebServices
import Foundation
import Testing

@Suite struct RetryTests {
    let zone = ZoneID(zoneName: "Notes")

    @Test func unavailableServerIsRetriedUntilItAnswers() async throws {
        let logs = LogRecorder()
        try await withServer(logs: logs) { server, client in
            server.enqueue(.error(503, code: "TRY_AGAIN_LATER"), .json(502, "<html>bad gateway</html>"), .json(200, emptyPage))
            let page = try await client.fetchRecordZoneChanges(zoneID: zone, syncToken: nil)
            #expect(page.syncToken == "zone-token-1")
            #expect(server.requests.count == 3)
        }
        let warnings = logs.lines.withLockedValue { $0.filter { $0.hasPrefix("warning") } }
        #expect(warnings.count == 2)
        #expect(warnings.first?.contains("attempt=1") == true)
        #expect(warnings.first?.contains("code=TRY_AGAIN_LATER") == true)
        #expect(warnings.first?.contains("cloudkit.operation=records/changes") == true)
        #expect(warnings.first?.contains("delay=") == true)
    }

    @Test func retryAfterInTheBodyIsHonoured() async throws {
        try await withServer { server, client in
            server.enqueue(.error(429, code: "THROTTLED", retryAfter: 0.3), .json(200, emptyPage))
            let start = ContinuousClock.now
            _ = try await client.fetchRecordZoneChanges(zoneID: zone, syncToken: nil)
            #expect(ContinuousClock.now - start >= .milliseconds(300))
            #expect(server.requests.count == 2)
        }
    }

    @Test func retryAfterHeaderIsHonoured() async throws {
        try await withServer { server, client in
            server.enqueue(.json(503, "", headers: [("Retry-After", "1")]), .json(200, emptyPage))
            let start = ContinuousClock.now
            _ = try await client.fetchRecordZoneChanges(zoneID: zone, syncToken: nil)
            #expect(ContinuousClock.now - start >= .seconds(1))
            #expect(server.requests.count == 2)
        }
    }

    @Test func spentBudgetEndsTheRetriesWithTheLastError() async throws {
        try await withServer(configure: {
            $0.retry = RetryPolicy(maxAttempts: 100, budget: .milliseconds(700), baseDelay: .milliseconds(10), jitter: false)
        }) { server, client in
            server.always(.error(429, code: "THROTTLED", retryAfter: 0.3))
            let error = try await #require(throws: CloudKitError.self) {
                _ = try await client.fetchRecordZoneChanges(zoneID: zone, syncToken: nil)
            }
            #expect(error.code == .throttled)
            #expect(error.retryAfter == 0.3)
            // The budget, not maxAttempts (100), ends the retries: at most 3 tries fit in 0.7 s of
            // 0.3 s waits (fewer when a loaded machine makes the first answers slow).
            #expect((1...3).contains(server.requests.count), "\(server.requests.count) attempts within 0.7 s of 0.3 s waits")
            #expect(error.attempts == server.requests.count)
        }
    }

    @Test func attemptsAreBoundedByMaxAttempts() async throws {
        try await withServer(configure: { $0.retry.maxAttempts = 3 }) { server, client in
            server.always(.error(500, code: "INTERNAL_ERROR"))
            let error = try await #require(throws: CloudKitError.self) {
                _ = try await client.fetchDatabaseChanges(syncToken: nil)
            }
            #expect(error.code == .internalError)
            #expect(server.requests.count == 3)
        }
    }

    @Test func otherClientErrorsAreNotRetried() async throws {
        try await withServer { server, client in
            server.always(.error(403, code: "ACCESS_DENIED"))
            let error = try await #require(throws: CloudKitError.self) {
                _ = try await client.fetchRecordZoneChanges(zoneID: zone, syncToken: nil)
            }
            #expect(error.code == .accessDenied)
            #expect(error.uuid == "uuid-403")
            #expect(server.requests.count == 1)
        }
    }

    @Test func bodyCutShortIsRetried() async throws {
        try await withServer { server, client in
            server.enqueue(.cutShort(declaredLength: 500, body: Array(#"{"records":[{"recordNa"#.utf8)), .json(200, emptyPage))
            let page = try await client.fetchRecordZoneChanges(zoneID: zone, syncToken: nil)
            #expect(page.syncToken == "zone-token-1")
            #expect(server.requests.count == 2)
        }
    }

    @Test func bodyThatIsNotJSONIsRetriedAndThenReported() async throws {
        try await withServer(configure: { $0.retry.maxAttempts = 2 }) { server, client in
            server.enqueue(.json(200, "<html>maintenance</html>"), .json(200, emptyPage))
            _ = try await client.fetchRecordZoneChanges(zoneID: zone, syncToken: nil)
            #expect(server.requests.count == 3 - 1)

            server.always(.json(200, #"{"records":[],"moreComing":false}"#))
            let error = try await #require(throws: CloudKitError.self) {
                _ = try await client.fetchRecordZoneChanges(zoneID: zone, syncToken: nil)
            }
            #expect(error.code == .malformedResponse)
            #expect(error.reason?.contains("syncToken") == true, "\(error)")
            #expect(error.attempts == 2)
        }
    }

    @Test func responseOverTheSizeLimitIsRefusedWithoutRetry() async throws {
        try await withServer(configure: { $0.maxResponseBytes = 1024 }) { server, client in
            let big = #"{"records":[],"syncToken":""# + String(repeating: "x", count: 4096) + #"","moreComing":false}"#
            server.always(.json(200, big))
            let error = try await #require(throws: CloudKitError.self) {
                _ = try await client.fetchRecordZoneChanges(zoneID: zone, syncToken: nil)
            }
            #expect(error.code == .responseTooLarge)
            #expect(error.description.contains("maxResponseBytes"))
            #expect(server.requests.count == 1)
        }
    }

    @Test func unreachableServerIsANetworkFaultAfterRetries() async throws {
        let server = try await CannedServer.start()
        // AsyncHTTPClient keeps trying to connect until the request's deadline.
        let client = makeClient(server) {
            $0.retry.maxAttempts = 2
            $0.timeout = .milliseconds(500)
        }
        try await server.stop()
        let error = try await #require(throws: CloudKitError.self) {
            _ = try await client.caller()
        }
        try await client.shutdown()
        #expect(error.code == .network)
        #expect(error.attempts == 2)
        #expect(error.description.contains("check the network and baseURL"))
    }

    /// Whatever delay a server asks for, no conversion traps; one that would not end within the
    /// retry budget (an hour against two minutes) is not waited at all: the request fails at
    /// once, having paused nothing, and the sentence says what was asked.
    @Test(arguments: [
        CannedServer.Reply.error(429, code: "THROTTLED", headers: [("Retry-After", "1e300")]),
        .error(429, code: "THROTTLED", headers: [("Retry-After", "99999999999999999999999999")]),
        .error(503, code: "TRY_AGAIN_LATER", headers: [("Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT")]),
        .error(429, code: "THROTTLED", retryAfter: 1e300),
        .json(429, #"{"serverErrorCode":"THROTTLED","retryAfter":1e999,"reason":"slow down"}"#),
        .error(429, code: "THROTTLED", retryAfter: 3600),
    ])
    func aRetryDelayBeyondTheBudgetFailsAtOnceAndPausesNothing(reply: CannedServer.Reply) async throws {
        try await withServer { server, client in
            server.always(reply)
            let started = ContinuousClock.now
            let error = try await #require(throws: CloudKitError.self) {
                _ = try await client.fetchRecordZoneChanges(zoneID: zone, syncToken: nil)
            }
            // A wait would be 300 s (maxRetryAfter) or the 120 s budget: a minute tells them apart
            // on a loaded machine too (10 s did not, once, in a full run of the suite on two cores).
            #expect(ContinuousClock.now - started < .seconds(60), "no wait was made")
            #expect(server.requests.count == 1)
            #expect(error.budgetExceeded)
            #expect(error.retryAfter == 300, "taken as maxRetryAfter at most")
            #expect(error.description.contains("asked to wait"), "\(error)")
            #expect(error.description.contains("would not end within the retry budget"), "\(error)")
            #expect(await client.throttledSeconds == 0, "nothing was paused, and nothing is reported")
        }
    }

    @Test func aRetryDelayThatIsNotANumberOrADateIsBackoffAlone() async throws {
        try await withServer { server, client in
            server.enqueue(.error(503, code: "TRY_AGAIN_LATER", headers: [("Retry-After", "soon")]), .json(200, emptyPage))
            let page = try await client.fetchRecordZoneChanges(zoneID: zone, syncToken: nil)
            #expect(page.syncToken == "zone-token-1")
            #expect(server.requests.count == 2)
        }
    }

    /// One zone's request is told to come back in an hour, and gives up rather than wait it
    /// out; another's, sent next, is not held back by the hour's pause (the throttled request
    /// left none: `RequestLimiterTests` shows the limiter's side of it).
    @Test func aThrottleOneRequestGivesUpOnHoldsNoOtherBack() async throws {
        try await withServer { server, client in
            server.enqueue(.error(429, code: "THROTTLED", retryAfter: 3600), .json(200, emptyPage))
            await #expect(throws: CloudKitError.self) {
                _ = try await client.fetchRecordZoneChanges(zoneID: zone, syncToken: nil)
            }
            let started = ContinuousClock.now
            _ = try await client.fetchRecordZoneChanges(zoneID: ZoneID(zoneName: "Other"), syncToken: nil)
            #expect(ContinuousClock.now - started < .seconds(60), "the other request went without waiting out the hour")
            #expect(await client.throttledSeconds == 0)
        }
    }

    /// A server that sends its head at once and then a byte every 300 ms is given up on when the
    /// whole answer's deadline passes, not after the three minutes its 600 bytes take.
    @Test func aBodyThatTricklesIsGivenUpAtTheDeadline() async throws {
        try await withServer(configure: {
            $0.timeout = .milliseconds(1500)
            $0.retry.maxAttempts = 1
        }) { server, client in
            let body = emptyPage + String(repeating: " ", count: 600 - emptyPage.utf8.count)
            server.always(.trickle(body: Array(body.utf8), interval: .milliseconds(300)))
            let started = ContinuousClock.now
            let error = try await #require(throws: CloudKitError.self) {
                _ = try await client.fetchRecordZoneChanges(zoneID: zone, syncToken: nil)
            }
            let took = ContinuousClock.now - started
            #expect(error.code == .timeout)
            #expect(took >= .milliseconds(1400) && took < .seconds(60), "at the deadline, not at the body's end: \(took)")
            #expect(error.description.contains("timeoutSeconds"), "\(error)")
        }
    }

    /// The web courier's long poll is bounded as a CloudKit answer is: a notification that
    /// trickles in a byte at a time is given up at twice the poll's time, not read for hours.
    /// The poll's time is long enough for the head to arrive on a loaded machine (a head later
    /// than the poll's time is an empty answer, not this failure; 600 ms was passed once).
    @Test func aCourierAnswerThatTricklesIsGivenUp() async throws {
        let server = try await CannedServer.start()
        let courier = WebCourier(url: server.baseURL + "/courier", pollTimeout: .seconds(5))
        let notification = #"{"ck":{"qry":{"zid":"Zone01"}}}"# + String(repeating: " ", count: 368)
        server.always(.trickle(body: Array(notification.utf8), interval: .milliseconds(300)))
        let started = ContinuousClock.now
        let error = await #expect(throws: CloudKitError.self) { _ = try await courier.poll() }
        let took = ContinuousClock.now - started
        try await courier.shutdown()
        try await server.stop()
        #expect(error?.code == .timeout, "\(String(describing: error))")
        #expect(took < .seconds(60), "400 bytes at 300 ms would take 2 minutes; the poll ends at 10 s: \(took)")
    }

    /// A courier's answer of a megabyte nested as deep as JSON may go (500 levels, a thousand
    /// times over) is read in one pass: through `JSONDecoder`, each level tried every type in
    /// turn and each miss built an error with the path so far, two seconds a kilobyte, so that
    /// one such answer held `watch` for half an hour.
    @Test(.timeLimit(.minutes(1))) func aCourierAnswerNestedDeepIsReadAtOnce() async throws {
        let server = try await CannedServer.start()
        let courier = WebCourier(url: server.baseURL + "/courier", pollTimeout: .seconds(30))
        let nested = String(repeating: "[", count: 500) + String(repeating: "]", count: 500)
        let deepObject = String(repeating: #"{"a":"#, count: 500) + "1" + String(repeating: "}", count: 500)
        let items = Array(repeating: nested, count: 400) + Array(repeating: deepObject, count: 180)
        let body = #"{"ck":{"qry":{"zid":"Zone01"}},"x":["# + items.joined(separator: ",") + "]}"
        #expect(body.utf8.count > 900_000 && body.utf8.count < 1 << 20, "\(body.utf8.count) bytes")
        server.always(.json(200, body))
        let started = ContinuousClock.now
        let notification = try await courier.poll()
        let took = ContinuousClock.now - started
        try await courier.shutdown()
        try await server.stop()
        #expect(notification?["ck"]?["qry"]?["zid"] == .string("Zone01"), "read as JSON, not taken as a body that is not")
        guard case .array(let items)? = notification?["x"] else {
            Issue.record("no list x in \(String(describing: notification).prefix(200))")
            return
        }
        #expect(items.count == 580)
        #expect(took < .seconds(30), "\(took)")
    }

    @Test func anAnswerThatStallsIsGivenUpAtTheIdleTimeout() async throws {
        try await withServer(configure: {
            $0.timeout = .seconds(300)
            $0.idleTimeout = .milliseconds(500)
            $0.retry.maxAttempts = 1
        }) { server, client in
            server.always(.trickle(body: Array(emptyPage.utf8), interval: .seconds(120)))
            let started = ContinuousClock.now
            let error = try await #require(throws: CloudKitError.self) {
                _ = try await client.fetchRecordZoneChanges(zoneID: zone, syncToken: nil)
            }
            #expect(error.code == .timeout)
            #expect(ContinuousClock.now - started < .seconds(60), "long before the first byte (120 s) and the deadline (300 s)")
        }
    }

    /// A run stopped (SIGTERM, a watch's end) while an answer is on its way does not wait for
    /// it: the request ends with the task, long before its deadline, and is not retried.
    @Test func aRequestWhoseTaskIsCancelledEndsWithoutItsAnswer() async throws {
        try await withServer(configure: {
            $0.timeout = .seconds(300)
            $0.idleTimeout = .seconds(300)
        }) { server, client in
            server.always(.trickle(body: Array(emptyPage.utf8), interval: .seconds(120)))
            let zone = zone
            let request = Task { try await client.fetchRecordZoneChanges(zoneID: zone, syncToken: nil) }
            try await waitUntil { !server.requests.isEmpty }
            try #require(server.requests.count == 1, "the request reached the server")
            let cancelled = ContinuousClock.now
            request.cancel()
            await #expect(throws: CancellationError.self) { _ = try await request.value }
            #expect(ContinuousClock.now - cancelled < .seconds(60), "long before the next byte (120 s) and the deadline (300 s)")
            #expect(server.requests.count == 1, "a cancelled request is not sent again")
        }
    }

    @Test func backoffGrowsExponentiallyUpToTheCapAndNeverUndercutsRetryAfter() {
        let policy = RetryPolicy(baseDelay: .milliseconds(500), maxDelay: .seconds(30), jitter: false)
        #expect(policy.delay(afterAttempt: 1, retryAfter: nil) == .milliseconds(500))
        #expect(policy.delay(afterAttempt: 3, retryAfter: nil) == .seconds(2))
        #expect(policy.delay(afterAttempt: 20, retryAfter: nil) == .seconds(30))
        #expect(policy.delay(afterAttempt: 1, retryAfter: 5) == .seconds(5))
        let jittered = RetryPolicy(baseDelay: .seconds(1), jitter: true)
        for _ in 0..<50 {
            let delay = jittered.delay(afterAttempt: 2, retryAfter: 0.25)
            #expect(delay >= .milliseconds(250) && delay <= .seconds(2))
        }
    }
}
