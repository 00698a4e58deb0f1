import CloudKitWebServices
import Logging
import Testing
import ZoneFeed
import ZoneFeedCloudKit

@Suite struct CloudKitSourceTests {
    func withSource<T: Sendable>(
        zones: ZoneSelection = .all,
        _ body: (CannedServer, CloudKitSource) async throws -> T
    ) async throws -> T {
        try await withCannedSource(
            configure: { settings in
                settings.zones = zones
                settings.resultsLimit = 100
                settings.desiredKeys = ["title"]
                settings.maxAttempts = 2
            }, body)
    }

    let zone = ZoneID(zoneName: "Notes")

    @Test func refusedTokenBearingFetchMeansTheTokenExpired() async throws {
        try await withSource { server, source in
            server.always(.error(400, code: "BAD_REQUEST", reason: "Unknown sync continuation type"))
            let error = try await #require(throws: SyncError.self) {
                _ = try await source.fetchZoneChanges(in: zone, since: ChangeToken("old"))
            }
            #expect(error.code == .changeTokenExpired)
            #expect(error.zoneID == zone)
            #expect(error.message.contains("Unknown sync continuation type"))
            #expect(server.requests.count == 1)
        }
    }

    @Test func changeTokenExpiredCodeMeansTheTokenExpired() async throws {
        try await withSource { server, source in
            server.always(.error(410, code: "CHANGE_TOKEN_EXPIRED"))
            let error = try await #require(throws: SyncError.self) {
                _ = try await source.fetchZoneChanges(in: zone, since: ChangeToken("old"))
            }
            #expect(error.code == .changeTokenExpired)
        }
    }

    @Test func refusedFirstFetchIsAFailureNotAnExpiredToken() async throws {
        try await withSource { server, source in
            server.always(.error(400, code: "BAD_REQUEST"))
            let error = try await #require(throws: SyncError.self) {
                _ = try await source.fetchZoneChanges(in: zone, since: nil)
            }
            #expect(error.code == .failed)
            #expect(error.message.contains("BAD_REQUEST"))
        }
    }

    @Test func missingZoneIsReportedAsNotFound() async throws {
        try await withSource { server, source in
            server.always(.error(404, code: "ZONE_NOT_FOUND"))
            let error = try await #require(throws: SyncError.self) {
                _ = try await source.fetchZoneChanges(in: zone, since: ChangeToken("t"))
            }
            #expect(error.code == .zoneNotFound)
            #expect(error.zoneID == zone)
        }
    }

    @Test func rejectedCredentialsNeedAPersonAndNameNoSecret() async throws {
        try await withSource { server, source in
            server.always(.error(421, code: "AUTHENTICATION_REQUIRED"))
            let error = try await #require(throws: SyncError.self) { _ = try await source.currentUser() }
            #expect(error.code == .authenticationRequired)
            #expect(error.message.contains("CLOUDKIT_WEB_AUTH_TOKEN"))
            #expect(Secrets.leaked(in: error.message).isEmpty)
        }
    }

    @Test func exhaustedRetriesFailTheZoneWithTheClientSentence() async throws {
        try await withSource { server, source in
            server.always(.error(503, code: "TRY_AGAIN_LATER"))
            let error = try await #require(throws: SyncError.self) {
                _ = try await source.fetchZoneChanges(in: zone, since: ChangeToken("t"))
            }
            #expect(error.code == .failed)
            #expect(error.message.contains("TRY_AGAIN_LATER"))
            #expect(server.requests.count == 2)
        }
    }

    /// The engine's error keeps the client's, whose code a caller may want, and shows the same
    /// sentence as before. A call that carried a sync token and met a 4xx a new token could
    /// change is taken as the token refused (REST documents no error for it): a resync, where
    /// before anything but 400 BAD_REQUEST failed the zone in every run.
    @Test(arguments: [
        (410, "CHANGE_TOKEN_EXPIRED", SyncError.Code.changeTokenExpired), (404, "ZONE_NOT_FOUND", .zoneNotFound),
        (421, "AUTHENTICATION_REQUIRED", .authenticationRequired), (403, "ACCESS_DENIED", .failed),
        (404, "NOT_FOUND", .changeTokenExpired), (409, "CONFLICT", .changeTokenExpired), (400, "INVALID_ARGUMENTS", .changeTokenExpired),
        (413, "QUOTA_EXCEEDED", .failed), (401, "AUTHENTICATION_FAILED", .authenticationRequired),
    ])
    func aSourceErrorKeepsTheCloudKitErrorItStandsFor(status: Int, serverErrorCode: String, code: SyncError.Code) async throws {
        try await withSource { server, source in
            server.always(.error(status, code: serverErrorCode, reason: "as the server said"))
            let error = try await #require(throws: SyncError.self) {
                _ = try await source.fetchZoneChanges(in: zone, since: ChangeToken("t"))
            }
            #expect(error.code == code)
            let underlying = try #require(error.underlying as? CloudKitError, "\(String(describing: error.underlying))")
            #expect(underlying.code == CloudKitError.Code(serverErrorCode: serverErrorCode))
            if code == .changeTokenExpired {
                #expect(error.message == "the server no longer accepts the sync token (\(serverErrorCode)): as the server said")
            } else {
                #expect(error.message == underlying.description)
            }
        }
    }

    /// A 4xx that is not CloudKit's own answer (a proxy's page, a 408 from one) is not taken as a
    /// refused token: each would cost the zone's whole refetch. It fails the zone, which the next
    /// run tries again from its token.
    @Test(arguments: [(404, "<html>not here</html>"), (408, "{}"), (409, "")])
    func aFourHundredThatIsNotCloudKitsAnswerIsNotARefusedToken(status: Int, body: String) async throws {
        try await withSource { server, source in
            server.always(.respond(status: status, headers: [("Content-Type", "text/html")], body: Array(body.utf8)))
            let error = try await #require(throws: SyncError.self) {
                _ = try await source.fetchZoneChanges(in: zone, since: ChangeToken("t"))
            }
            #expect(error.code == .failed, "\(error)")
        }
    }

    @Test func zonePagesCarryTheSettingsAndTheFeed() async throws {
        try await withSource { server, source in
            let answer = #"{"records":[{"recordName":"r","deleted":true}],"syncToken":"t2","moreComing":true}"#
            server.enqueue(.json(200, answer))
            let page = try await source.fetchZoneChanges(in: zone, since: ChangeToken("t1"))
            #expect(page.entries == [.deleted(recordName: "r")])
            #expect(page.byteCount == answer.utf8.count, "the bytes its batch holds until it commits")
            #expect(page.syncToken == ChangeToken("t2"))
            #expect(page.moreComing)
            let body = try #require(server.requests.first?.bodyText)
            #expect(body.contains(#""resultsLimit":100"#))
            #expect(body.contains(#""desiredKeys":["title"]"#))
            #expect(body.contains(#""syncToken":"t1""#))
        }
    }

    // MARK: Reading ahead

    static func page(_ name: String, next token: String, moreComing: Bool) -> CannedServer.Reply {
        .json(200, #"{"records":[{"recordName":"\#(name)","deleted":true}],"syncToken":"\#(token)","moreComing":\#(moreComing)}"#)
    }

    /// Waits until the server has seen `count` requests, for at most a minute (a loaded machine
    /// can hold a loopback request for seconds).
    static func requests(_ count: Int, on server: CannedServer) async throws -> Bool {
        for _ in 0..<6_000 where server.requests.count < count { try await Task.sleep(for: .milliseconds(10)) }
        return server.requests.count == count
    }

    @Test func theNextPageIsRequestedBeforeTheEngineAsksForIt() async throws {
        try await withSource { server, source in
            server.enqueue(Self.page("a", next: "t2", moreComing: true))
            server.enqueue(Self.page("b", next: "t3", moreComing: false))
            var pages = source.zonePages(in: zone, since: ChangeToken("t1"), readingAhead: 1).makeAsyncIterator()
            let first = try #require(try await pages.next())
            #expect(first.entries == [.deleted(recordName: "a")])
            #expect(try await Self.requests(2, on: server), "the second page was requested ahead")
            #expect(server.requests[1].bodyText.contains(#""syncToken":"t2""#))

            let second = try #require(try await pages.next())
            #expect(second.entries == [.deleted(recordName: "b")])
            #expect(second.syncToken == ChangeToken("t3"))
            #expect(!second.moreComing)
            // The end came from the feed itself, after its last fetch: nothing is fetched after it.
            #expect(try await pages.next() == nil, "the feed ends with the page that says nothing more is coming")
            #expect(server.requests.count == 2, "the page read ahead is used, not fetched again, and the last page reads nothing ahead")
        }
    }

    /// A resync reads the zone from no token: its first request carries none. (How far the
    /// pages are read ahead is the engine's: `ZoneChangeFeedTests`.)
    @Test func aFeedFromNoTokenAsksWithoutOne() async throws {
        try await withSource { server, source in
            server.enqueue(Self.page("p1", next: "t2", moreComing: false))
            var pages = source.zonePages(in: zone, since: nil, readingAhead: 2).makeAsyncIterator()
            let page = try #require(try await pages.next())
            #expect(page.entries == [.deleted(recordName: "p1")])
            #expect(try await pages.next() == nil)
            #expect(server.requests.count == 1)
            #expect(!server.requests[0].bodyText.contains("syncToken"))
        }
    }

    @Test func aFailedReadAheadReachesTheEngineAfterThePagesBeforeIt() async throws {
        try await withSource { server, source in
            server.enqueue(Self.page("a", next: "t2", moreComing: true))
            server.enqueue(.error(400, code: "BAD_REQUEST", reason: "Unknown sync continuation type"))
            var pages = source.zonePages(in: zone, since: ChangeToken("t1"), readingAhead: 1).makeAsyncIterator()
            let first = try #require(try await pages.next())
            #expect(first.entries == [.deleted(recordName: "a")])
            let error = try await #require(throws: SyncError.self) { _ = try await pages.next() }
            #expect(error.code == .changeTokenExpired)
            #expect(server.requests.count == 2)
        }
    }

    @Test func aPagesOwnTokenCountsNotAMemberOfTheSameNameInARecord() async throws {
        try await withSource { server, source in
            // The page's own token comes first; a record's asset holds members of the same names
            // near the end: the page's own are the ones that count.
            server.enqueue(
                .json(
                    200,
                    #"""
                    {"syncToken":"t2","moreComing":true,"records":[{"recordName":"r","recordType":"Note",
                     "fields":{"f":{"value":{"syncToken":"nested","moreComing":false},"type":"ASSETID"}}}]}
                    """#))
            server.enqueue(Self.page("b", next: "t3", moreComing: false))
            let first = try await source.fetchZoneChanges(in: zone, since: ChangeToken("t1"))
            #expect(first.syncToken == ChangeToken("t2"))
            #expect(first.moreComing)
            let second = try await source.fetchZoneChanges(in: zone, since: first.syncToken)
            #expect(second.entries == [.deleted(recordName: "b")])
            #expect(server.requests.count == 2)
            #expect(server.requests[1].bodyText.contains(#""syncToken":"t2""#))
        }
    }

    /// A page holding an entry of no shape CloudKit sends is asked for once more, as a passing
    /// fault's would be gone; given again, it is taken with such entries as rejects, rather than
    /// failing the zone at that page in every run. One without a name to keep its row by (which
    /// a sweep or a resync would take for deleted) is refused as a page that is not JSON is.
    @Test func aPageWhoseEntriesAreOfNoKnownShapeIsAskedOnceMoreThenTakenWithThemAsRejects() async throws {
        let odd = #"{"records":[{"recordName":"odd","recordType":5},{"recordName":"a","deleted":true}],"syncToken":"t2","moreComing":false}"#
        try await withSource { server, source in
            for _ in 0..<2 { server.enqueue(.json(200, odd)) }
            let page = try await source.fetchZoneChanges(in: zone, since: ChangeToken("t1"))
            #expect(server.requests.count == 2, "asked once more")
            #expect(page.syncToken == ChangeToken("t2"))
            guard page.entries.count == 2, case .unreadable(let entry) = page.entries[0] else {
                Issue.record("\(page.entries)")
                return
            }
            #expect(entry.ofNoKnownShape && entry.recordName == "odd" && entry.problem == "the entry is not one CloudKit sends (expected a string)")
            #expect(page.entries[1] == .deleted(recordName: "a"))
        }
        let nameless = #"{"records":[{"recordType":"Note"}],"syncToken":"t2","moreComing":false}"#
        try await withSource { server, source in
            for _ in 0..<3 { server.enqueue(.json(200, nameless)) }
            await #expect(throws: SyncError.self) { _ = try await source.fetchZoneChanges(in: zone, since: ChangeToken("t1")) }
            #expect(server.requests.count == 2, "asked as often as the attempts allow (maxAttempts: 2)")
        }
    }

    @Test func aPageWhoseRecordsCannotBeReadIsFetchedAgain() async throws {
        try await withSource { server, source in
            server.enqueue(.json(200, #"{"records":[{"recordType":"Note"}],"syncToken":"t2","moreComing":false}"#))
            server.enqueue(Self.page("a", next: "t2", moreComing: false))
            let page = try await source.fetchZoneChanges(in: zone, since: ChangeToken("t1"))
            #expect(page.entries == [.deleted(recordName: "a")])
            #expect(server.requests.count == 2)
            #expect(server.requests.allSatisfy { $0.bodyText.contains(#""syncToken":"t1""#) })
        }
    }

    @Test func databaseFeedBecomesModifiedAndDeletedZones() async throws {
        try await withSource { server, source in
            server.enqueue(
                .json(
                    200,
                    #"""
                    {"zones":[{"zoneID":{"zoneName":"A","ownerRecordName":"_o"}},
                              {"zoneID":{"zoneName":"B","ownerRecordName":"_o"},"deleted":true},
                              {"zoneID":{"zoneName":"C","ownerRecordName":"_o"},"purged":true},
                              {"zoneID":{"zoneName":"D","ownerRecordName":"_o"},"encryptedDataReset":true}],
                     "syncToken":"db-1","moreComing":null}
                    """#))
            let page = try await source.fetchDatabaseChanges(since: nil)
            #expect(page.modifiedZones == [ZoneID(zoneName: "A", ownerRecordName: "_o")])
            #expect(
                page.deletedZones == [
                    ZoneDeletion(zoneID: ZoneID(zoneName: "B", ownerRecordName: "_o"), reason: .deleted),
                    ZoneDeletion(zoneID: ZoneID(zoneName: "C", ownerRecordName: "_o"), reason: .purged),
                    ZoneDeletion(zoneID: ZoneID(zoneName: "D", ownerRecordName: "_o"), reason: .encryptedDataReset),
                ])
            #expect(page.syncToken == ChangeToken("db-1"))
            #expect(!page.moreComing)
        }
    }

    @Test func namedZonesBelongToTheCaller() async throws {
        try await withSource(zones: .named(["Notes", "Archive"])) { _, source in
            #expect(source.namedZones == [ZoneID(zoneName: "Notes", ownerRecordName: "__defaultOwner__"), ZoneID(zoneName: "Archive")])
        }
        try await withSource { _, source in #expect(source.namedZones == nil) }
    }

    /// Who the credentials belong to comes from `users/caller` of the public database (whatever
    /// database the pipeline reads), asked with the session's token, in either shape CloudKit
    /// answers; an answer that names nobody is an error, not a user.
    @Test func currentUserIsTheCallersRecordName() async throws {
        try await withSource { server, source in
            server.enqueue(.json(200, #"{"users":[{"userRecordName":"_alice","firstName":"A"}]}"#))
            server.enqueue(.json(200, #"{"userRecordName":"_bob"}"#))
            server.enqueue(.json(200, #"{"users":[]}"#))
            let alice = try await source.currentUser()
            let bob = try await source.currentUser()
            #expect(alice == "_alice" && bob == "_bob")
            await #expect(throws: SyncError.self) { _ = try await source.currentUser() }
            for request in server.requests {
                #expect(request.method == .GET)
                #expect(request.path.hasSuffix("/public/users/caller"), "\(request.path)")
                #expect(request.rawQueryValue("ckWebAuthToken") != nil, "the session's token is carried")
            }
        }
    }
}
