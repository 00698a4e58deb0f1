import AsyncHTTPClient
import FakeCloudKit
import Foundation
import TestSupport
import Testing

/// `zonefeed login` in the built binary against `zonefeed fake-server`, whose 421 sends a person
/// to its own sign-in page: in headless Chromium, through the pasted final address, and every
/// way a sign-in can fail. The server accepts only the tokens its sign-in page hands out (the
/// pipeline's configured token is stale), so a run succeeds only with the stored sign-in.
@Suite(.onItsOwnThread) struct LoginTests {
    typealias Setup = CloudKitEndToEndTests.Setup

    /// A pipeline whose configured token the server never accepts, and a server whose sign-in
    /// page sends the browser to `callbackPort`.
    static func setup(_ prefix: String, callbackPort: Int, server more: [String] = [], configure: (inout FakePipeline) -> Void = { _ in }) async throws
        -> Setup
    {
        try await Setup(
            prefix, fake: FakeSettings(seed: 91, zones: 2, recordsPerZone: 300),
            server: ["--web-auth-token", "never-handed-out-\(UUID().uuidString)", "--sign-in-callback", "http://127.0.0.1:\(callbackPort)/callback"]
                + FakeServerProcess.strict + more
        ) { p in
            p.webAuthToken = "stale-configured-token"
            configure(&p)
        }
    }

    /// Waits for login's stdout to give what `found` finds in it, 180 s at most: its output is
    /// read as it comes (the binary's pipe has no event to await), looked at every 100 ms.
    static func waitFor<T>(
        _ what: String, of login: ZonefeedBinary.Running, _ found: (String) -> T?
    ) async throws -> T {
        let deadline = ContinuousClock.now + .seconds(180)
        while ContinuousClock.now < deadline {
            if let found = found(login.stdoutSoFar) { return found }
            guard login.isRunning else { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        let output = await login.stop()
        throw LoginTestError("login did not say \(what): \(output.stdout) \(output.stderr)")
    }

    /// The sign-in address login prints.
    static func signInAddress(of login: ZonefeedBinary.Running) async throws -> String {
        try await waitFor("the sign-in address", of: login) { stdout in
            stdout.split(separator: "\n").first { $0.contains("/signin") }.map { $0.trimmingCharacters(in: .whitespaces) }
        }
    }

    /// The sign-in form submitted as a browser does, the 303 not followed: the callback address.
    static func submitSignIn(_ server: FakeServerProcess, _ form: String) async throws -> String {
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(redirectConfiguration: .disallow))
        var request = HTTPClientRequest(url: "\(server.url)/signin")
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        request.body = .bytes(Array(form.utf8))
        do {
            let response = try await client.execute(request, timeout: .seconds(60))
            _ = try await response.body.collect(upTo: 1 << 20)
            try await client.shutdown()
            guard response.status.code == 303, let location = response.headers.first(name: "Location") else {
                throw LoginTestError("the sign-in page answered \(response.status.code) without a Location")
            }
            return location
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    /// What the browser does with the 303: a GET of the callback address; the page it shows.
    static func visit(_ address: String) async throws -> String {
        let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: address), timeout: .seconds(60))
        return String(buffer: try await response.body.collect(upTo: 1 << 20))
    }

    /// `zonefeed login` waiting for its callback on `port`, once it has printed the address.
    static func startLogin(_ s: Setup, port: Int) async throws -> ZonefeedBinary.Running {
        var z = s.zonefeed
        z.environment.merge(s.p.environment) { _, new in new }
        let login = try await z.start(["login", s.file, "--no-browser", "--callback-port", "\(port)", "--timeout", "900"])
        _ = try await signInAddress(of: login)
        return login
    }

    /// Keeps the next sign-in check (`users/caller`) at the server until `faults/clear`, and
    /// returns once the one `send` brings about is kept there.
    static func holdTheCheck(_ s: Setup, of login: ZonefeedBinary.Running, sentBy send: () async throws -> Void) async throws {
        let held = try await s.holdTheNextRequest(to: "users/caller", sentBy: send)
        try #require(held != nil, "the check reached the server: \(login.stdoutSoFar)")
    }

    /// The tokens in a token file (the newest and the earlier ones): none may ever be printed.
    static func tokens(in lines: [String]) -> [String] {
        lines.enumerated().compactMap { index, line in
            index == 0 ? line : line.hasPrefix("earlier=") ? String(line.dropFirst("earlier=".count)) : nil
        }
    }

    @Test func signingInWithHeadlessChromiumStoresATokenTheNextRunUses() async throws {
        let port = try TestPushgateway.freeLoopbackPort()
        let s = try await Self.setup("login-browser", callbackPort: port)
        defer { s.stop() }
        let stale = try await s.run()
        #expect(stale.status == 3, "the configured token is stale: \(stale.stderr)")
        #expect(stale.stderr.contains("login \(s.file)"), "the exit-3 sentence names the command: \(stale.stderr)")

        var z = s.zonefeed
        z.environment.merge(s.p.environment) { _, new in new }
        let login = try await z.start(["login", s.file, "--no-browser", "--callback-port", "\(port)", "--timeout", "900"])
        defer { login.end() }
        let address = try await Self.signInAddress(of: login)
        #expect(address.hasPrefix("\(s.server.url)/signin"))

        let driver = try await ChromeDriver()
        defer { driver.stop() }
        let browser = try await driver.newSession(profile: s.zonefeed.directory.appendingPathComponent("chromium-profile"))
        let screenshot = s.zonefeed.directory.deletingLastPathComponent().appendingPathComponent("zonefeed-login-\(s.p.name).png")
        do {
            try await browser.navigate(to: address)
            try await browser.click("#keep-signed-in")
            try await browser.click("#sign-in")
            let callback = "http://127.0.0.1:\(port)/callback"
            let deadline = ContinuousClock.now + .seconds(180)
            var reached = ""
            while ContinuousClock.now < deadline {
                reached = try await browser.currentURL
                if reached.hasPrefix(callback) { break }
                try await Task.sleep(for: .milliseconds(200))
            }
            #expect(reached.hasPrefix(callback + "?ckWebAuthToken="), "the browser reached zonefeed's callback: \(reached)")
            let page = try await browser.pageText
            #expect(page.contains("You may close this tab"), "\(page)")
            try await browser.screenshot().write(to: screenshot)
            print("LoginTests: the browser's page at the callback: \(screenshot.path)")
        } catch {
            await browser.end()
            throw error
        }
        await browser.end()

        let (output, timedOut) = await login.wait(within: .seconds(300))
        #expect(!timedOut)
        #expect(output.status == 0, "\(output.stdout)\n\(output.stderr)")
        #expect(output.stdout.contains("Signed in as _fakeUser"), "\(output.stdout)")
        print("LoginTests: zonefeed login said:\n\(output.stdout)")
        let lines = try s.tokenFileLines()
        let stored = Self.tokens(in: lines)
        #expect(stored.first?.hasPrefix("fake+") == true, "the sign-in's token (rotated once by users/caller) is first")
        #expect(lines.contains("user=_fakeUser"))
        for token in stored {
            #expect(!output.stdout.contains(token) && !output.stderr.contains(token), "a token was printed")
        }

        let run = try await s.run()
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try await s.liveDifferences() == [])
    }

    /// The sign-in address comes from the server, and goes to the desktop's opener only when it
    /// is a web page: an opener takes `file:` and other schemes too, and `open` takes `-v` for an
    /// option. Any other address is printed, and the person told why it was not opened. An
    /// opener that records what it was given stands in for xdg-open; the server's own sign-in
    /// page (http on this machine) reaches it, so the stand-in is seen to work.
    @Test(arguments: [nil, "file:///etc/passwd", "-v", "smb://elsewhere/share"])
    func onlyASignInAddressThatIsAWebPageIsOpened(_ hostile: String?) async throws {
        let port = try TestPushgateway.freeLoopbackPort()
        let s = try await Self.setup("login-open", callbackPort: port, server: hostile.map { ["--sign-in-address=\($0)"] } ?? [])
        defer { s.stop() }
        let bin = s.zonefeed.directory.appendingPathComponent("bin")
        try FileManager.default.createDirectory(at: bin, withIntermediateDirectories: true)
        let opened = s.zonefeed.directory.appendingPathComponent("opened").path
        let opener = bin.appendingPathComponent("xdg-open").path
        try "#!/bin/sh\nprintf '%s\\n' \"$@\" >> '\(opened)'\n".write(toFile: opener, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: opener)

        var z = s.zonefeed
        z.environment.merge(s.p.environment) { _, new in new }
        z.environment["DISPLAY"] = ":99"
        z.environment["PATH"] = bin.path + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
        let output = try await z.run(["login", s.file, "--callback-port", "\(port)", "--timeout", "3"])
        let given = (try? String(contentsOfFile: opened, encoding: .utf8)) ?? ""
        if let hostile {
            #expect(given.isEmpty, "the opener was not run: \(given)")
            #expect(output.stdout.contains("not opened in your browser"), "\(output.stdout)")
            #expect(output.stdout.contains(hostile), "the address is printed: \(output.stdout)")
        } else {
            #expect(given.hasPrefix("\(s.server.url)/signin"), "the server's own page went to the opener: \(given) \(output.stdout)")
        }
    }

    @Test func aPastedFinalAddressSignsInAndStatusAndMetricsTellTheSession() async throws {
        let s = try await Self.setup("login-paste", callbackPort: 9)
        defer { s.stop() }
        let callback = try await Self.submitSignIn(s.server, "keep=1&action=sign-in")
        #expect(callback.hasPrefix("http://127.0.0.1:9/callback?ckWebAuthToken="))
        let signedIn = try #require(callback.split(separator: "=", maxSplits: 1).last.flatMap { String($0).removingPercentEncoding })

        var z = s.zonefeed
        z.environment.merge(s.p.environment) { _, new in new }
        let pasted = try await z.shell("printf '%s\\n' '\(callback)' | '\(ZonefeedBinary.path)' login '\(s.file)' --paste")
        #expect(pasted.status == 0, "\(pasted.stdout)\n\(pasted.stderr)")
        #expect(pasted.stdout.contains("\(s.server.url)/signin"), "the address to sign in at is printed")
        #expect(pasted.stdout.contains("Signed in as _fakeUser"))
        let stored = Self.tokens(in: try s.tokenFileLines())
        #expect(stored.contains(signedIn), "the signed-in token is stored (users/caller rotated it once)")

        let metrics = s.zonefeed.directory.appendingPathComponent("zonefeed.prom").path
        let run = try await s.run(["--metrics-file", metrics])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try await s.liveDifferences() == [])
        let text = try String(contentsOfFile: metrics, encoding: .utf8)
        let now = Date().timeIntervalSince1970
        for name in ["zonefeed_web_auth_token_last_rotated_timestamp_seconds", "zonefeed_web_auth_token_signed_in_timestamp_seconds"] {
            let sample = text.split(separator: "\n").first { $0.hasPrefix(name + "{") }
            let value = sample?.split(separator: " ").last.flatMap { Double($0) }
            #expect(value.map { abs(now - $0) < 3_600 } == true, "\(name): \(sample ?? "missing")")
        }

        let status = try await z.run(["status", s.file])
        #expect(status.status == 0, "\(status.stderr)")
        #expect(status.stdout.contains("_fakeUser, signed in"), "\(status.stdout)")
        #expect(status.stdout.contains("last rotated"))
        #expect(status.stdout.contains("last used by a run"))
        for token in stored + Self.tokens(in: try s.tokenFileLines()) {
            for text in [pasted.stdout, pasted.stderr, run.stdout, run.stderr, status.stdout, status.stderr] {
                #expect(!text.contains(token), "a token was printed")
            }
        }
    }

    @Test func aSignInIsStoredInTheDatabaseWhenThePipelineKeepsItsTokensThere() async throws {
        let s = try await Self.setup("login-db", callbackPort: 9) { p in
            p.webAuthTokenFile = nil
            p.webAuthTokenStore = "database"
        }
        defer { s.stop() }
        let callback = try await Self.submitSignIn(s.server, "action=sign-in")
        var z = s.zonefeed
        z.environment.merge(s.p.environment) { _, new in new }
        let pasted = try await z.shell("printf '%s\\n' '\(callback)' | '\(ZonefeedBinary.path)' login '\(s.file)' --paste")
        #expect(pasted.status == 0, "\(pasted.stdout)\n\(pasted.stderr)")
        #expect(pasted.stdout.contains("zonefeed_web_auth_tokens"), "says where the token went: \(pasted.stdout)")
        #expect(!FileManager.default.fileExists(atPath: s.zonefeed.directory.appendingPathComponent(".zonefeed").path), "no token file")
        let run = try await s.run()
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try await s.liveDifferences() == [])
        let status = try await z.run(["status", s.file])
        #expect(status.stdout.contains("_fakeUser, signed in"), "\(status.stdout)")
    }

    /// A pasted address whose token is longer than any token zonefeed keeps (8 KiB; a token is a
    /// few hundred bytes) is refused and nothing is stored: once it moved to an `earlier=` line,
    /// a token of 16 KiB made the token file one that the next run refuses to read.
    @Test func aPastedTokenLongerThanATokenIsRefusedAndNothingIsStored() async throws {
        let s = try await Self.setup("login-long", callbackPort: 9)
        defer { s.stop() }
        var z = s.zonefeed
        z.environment.merge(s.p.environment) { _, new in new }
        let address = "http://127.0.0.1:9/callback?ckWebAuthToken=" + String(repeating: "A", count: 8_193)
        let pasted = try await z.shell("printf '%s\\n' '\(address)' | '\(ZonefeedBinary.path)' login '\(s.file)' --paste")
        #expect(pasted.status == 3, "\(pasted.stdout)\n\(pasted.stderr)")
        #expect(
            pasted.stderr.contains("ckWebAuthToken is 8193 bytes long, and a token is a few hundred (at most 8192); copy the address again"),
            "\(pasted.stderr)")
        #expect(!pasted.stderr.contains("AAAAAAAA") && !pasted.stdout.contains("AAAAAAAA"), "the token is not echoed")
        #expect((try? s.tokenFileLines()) == nil, "no token file")
    }

    /// Waits for login to say `words` on stdout.
    static func waitForSaying(_ words: String, _ login: ZonefeedBinary.Running) async throws {
        try await waitFor(words, of: login) { $0.contains(words) ? () : nil }
    }

    /// A sign-in cancelled in the browser, or refused by CloudKit, is said and stores nothing;
    /// login keeps the callback and waits on (a forged answer must not give the port away), and
    /// the sign-in after it is taken.
    @Test(arguments: ["cancelled", "refused"])
    func aSignInThatDoesNotCompleteIsWaitedPastAndTheNextIsTaken(_ how: String) async throws {
        let port = try TestPushgateway.freeLoopbackPort()
        let s = try await Self.setup("login-\(how)", callbackPort: port)
        defer { s.stop() }
        if how == "refused" { try await s.server.admin("auth/sign-in", ["refuse": true]) }
        let login = try await Self.startLogin(s, port: port)
        defer { login.end() }
        let page = try await Self.visit(try await Self.submitSignIn(s.server, how == "cancelled" ? "action=cancel" : "action=sign-in"))
        #expect(page.contains("did not complete"), "\(page)")
        let said = how == "cancelled" ? "the sign-in was cancelled in the browser" : "CloudKit refused the sign-in"
        try await Self.waitForSaying("\(said); nothing was stored. Still waiting", login)
        #expect(login.isRunning, "login waits on")
        #expect((try? s.tokenFileLines()) == nil, "no token file")

        if how == "refused" { try await s.server.admin("auth/sign-in", ["refuse": false]) }
        _ = try await Self.visit(try await Self.submitSignIn(s.server, "action=sign-in"))
        let (output, timedOut) = await login.wait(within: .seconds(300))
        #expect(!timedOut)
        #expect(output.status == 0, "\(output.stdout)\n\(output.stderr)")
        #expect(output.stdout.contains("Signed in as _fakeUser"), "\(output.stdout)")
    }

    /// CloudKit's sign-in has no `state` to tie the callback to it, so anyone on this machine,
    /// or a web page in its browser, can send one. Before, the first request was the answer and
    /// the port was let go: a forged one stopped login, and another process could take the port
    /// and catch the real token. Now a callback without a token, or with one CloudKit refuses,
    /// is waited past, the port kept, the stored tokens left as they were, and the real sign-in
    /// taken.
    @Test func forgedCallbacksNeitherEndTheSignInNorAreStored() async throws {
        let port = try TestPushgateway.freeLoopbackPort()
        let s = try await Self.setup("login-forged", callbackPort: port)
        defer { s.stop() }
        let login = try await Self.startLogin(s, port: port)
        defer { login.end() }
        _ = try await Self.visit("http://127.0.0.1:\(port)/callback?error=forged")
        try await Self.waitForSaying("the sign-in did not complete (forged); nothing was stored. Still waiting", login)
        _ = try await Self.visit("http://127.0.0.1:\(port)/callback?ckWebAuthToken=forged-token-of-another-account")
        try await Self.waitForSaying("CloudKit refused the token the sign-in gave", login)
        #expect(login.isRunning, "login waits on, holding the port")
        let lines = (try? s.tokenFileLines()) ?? []
        #expect(!lines.contains { $0.contains("forged-token") }, "the forged token is not kept: \(lines)")

        // A token CloudKit answers otherwise than with a refusal (here a 400, which the fake
        // gives only past its check of the token: so a real sign-in's) is waited past too: a
        // forged one answered so, ending login, would free the port as surely.
        _ = try await s.server.admin("faults/fail", ["status": 400, "pathSuffix": "users/caller", "count": 1])
        _ = try await Self.visit(try await Self.submitSignIn(s.server, "action=sign-in"))
        try await Self.waitForSaying("the sign-in could not be checked or stored", login)
        #expect(login.isRunning, "login waits on, holding the port")

        _ = try await Self.visit(try await Self.submitSignIn(s.server, "action=sign-in"))
        let (output, timedOut) = await login.wait(within: .seconds(300))
        #expect(!timedOut)
        #expect(output.status == 0, "\(output.stdout)\n\(output.stderr)")
        let stored = Self.tokens(in: try s.tokenFileLines())
        #expect(stored.first?.hasPrefix("fake+") == true, "the real sign-in's token is stored first")
        #expect(!stored.contains { $0.contains("forged") })
    }

    /// A token is checked before it is stored: while CloudKit has not answered, the store holds
    /// the tokens of the sign-in before, and a Ctrl-C then leaves them there, the next run
    /// using them. The token was written over them first and they were put back only when the
    /// check failed: a run starting meanwhile had only a token that may be anyone's (the
    /// callback has no `state`), and a stop during the check left that token alone.
    @Test func aTokenBeingCheckedIsNotStoredAndAStopLeavesTheStoreAsItWas() async throws {
        let port = try TestPushgateway.freeLoopbackPort()
        let s = try await Self.setup("login-held", callbackPort: port)
        defer { s.stop() }
        var z = s.zonefeed
        z.environment.merge(s.p.environment) { _, new in new }
        let first = try await Self.submitSignIn(s.server, "action=sign-in")
        let pasted = try await z.shell("printf '%s\\n' '\(first)' | '\(ZonefeedBinary.path)' login '\(s.file)' --paste")
        #expect(pasted.status == 0, "\(pasted.stdout)\n\(pasted.stderr)")
        let before = try s.tokenFileLines()

        let login = try await Self.startLogin(s, port: port)
        defer { login.end() }
        try await Self.holdTheCheck(s, of: login) { _ = try await Self.visit(try await Self.submitSignIn(s.server, "action=sign-in")) }
        #expect(try s.tokenFileLines() == before, "the store holds the sign-in before's tokens while the new one is checked")
        login.signal(SIGINT)
        let (stopped, timedOut) = await login.wait(within: .seconds(60))
        #expect(!timedOut && stopped.status != 0, "\(stopped.stdout)\n\(stopped.stderr)")
        _ = try await s.server.admin("faults/clear")
        #expect(try s.tokenFileLines() == before, "a stop during the check leaves the store as it was")
        let run = try await s.run()
        #expect(run.status == 0, "the next run signs in with the tokens kept: \(run.stderr)")
    }

    /// A flood of forged callbacks (from any program on this machine, or a page in its
    /// browser) does not push out the browser's: the callbacks that came first are kept, and
    /// those past what login takes at once are told to reload, and the terminal says so once. The
    /// newest were kept before, and
    /// the browser's, which had been told it was signed in, was dropped unchecked.
    @Test func aFloodOfForgedCallbacksDoesNotPushOutTheBrowsers() async throws {
        let port = try TestPushgateway.freeLoopbackPort()
        let s = try await Self.setup("login-flood", callbackPort: port)
        defer { s.stop() }
        let login = try await Self.startLogin(s, port: port)
        defer { login.end() }
        // The first forged token's check is kept at the server while the rest arrive.
        try await Self.holdTheCheck(s, of: login) { _ = try await Self.visit("http://127.0.0.1:\(port)/callback?ckWebAuthToken=forged-first") }
        let browsers = try await Self.visit(try await Self.submitSignIn(s.server, "action=sign-in"))
        #expect(browsers.contains("checking it with CloudKit"), "\(browsers)")
        var pages: [String] = []
        // 16 wait their turn (the browser's and 15 of these), and 5 find no room.
        for i in 0..<20 {
            pages.append(try await Self.visit("http://127.0.0.1:\(port)/callback?ckWebAuthToken=forged-\(i)"))
        }
        #expect(pages.filter { $0.contains("reload this page") }.count == 5, "the callbacks past the 16 waiting are told to reload")
        _ = try await s.server.admin("faults/clear")
        let (output, timedOut) = await login.wait(within: .seconds(300))
        #expect(!timedOut && output.status == 0, "\(output.stdout)\n\(output.stderr)")
        #expect(output.stdout.contains("Signed in as _fakeUser"), "\(output.stdout)")
        let warnings = output.stderr.components(separatedBy: "callbacks came than 16 can wait to be checked").count - 1
        #expect(warnings == 1, "the terminal says once that callbacks were turned away: \(output.stderr)")
        let stored = Self.tokens(in: try s.tokenFileLines())
        #expect(stored.first?.hasPrefix("fake+") == true && !stored.contains { $0.contains("forged") }, "the browser's sign-in is stored")
    }

    @Test func aSignInThatNeverComesBackTimesOutWithExitThree() async throws {
        let port = try TestPushgateway.freeLoopbackPort()
        let s = try await Self.setup("login-timeout", callbackPort: port)
        defer { s.stop() }
        var z = s.zonefeed
        z.environment.merge(s.p.environment) { _, new in new }
        let started = ContinuousClock.now
        let login = try await z.start(["login", s.file, "--no-browser", "--callback-port", "\(port)", "--timeout", "2"])
        let (output, timedOut) = await login.wait(within: .seconds(300))
        #expect(!timedOut)
        #expect(output.status == 3)
        #expect(output.stderr.contains("no sign-in came back to http://127.0.0.1:\(port)/callback within 2 s"), "\(output.stderr)")
        print("LoginTests: login with --timeout 2 ended after \(ContinuousClock.now - started)")
    }

    @Test func aSessionThatEndsStopsTheRunWithExitThreeNamingLoginAndASignInMendsIt() async throws {
        // The configured token is good, but its session (from the server's start) lasts an hour,
        // of which the server is told that it has passed: no wait, and no load on the machine
        // ends it before the test means it to.
        let s = try await Setup(
            "login-session", fake: FakeSettings(seed: 92, zones: 2, recordsPerZone: 200),
            server: ["--session-lifetime", "3600", "--sign-in-callback", "http://127.0.0.1:9/callback"] + FakeServerProcess.strict)
        defer { s.stop() }
        try await s.server.admin("auth/sign-in", ["elapseSeconds": 3601])
        let ended = try await s.run()
        #expect(ended.status == 3, "\(ended.stderr)")
        #expect(ended.stderr.contains("CloudKit needs a new sign-in: run "), "\(ended.stderr)")
        #expect(ended.stderr.contains("login \(s.file), then run again"), "\(ended.stderr)")
        #expect(ended.stderr.contains("AUTHENTICATION_REQUIRED"))

        // "Keep me signed in": the long session has no end on this server.
        let callback = try await Self.submitSignIn(s.server, "keep=1&action=sign-in")
        var z = s.zonefeed
        z.environment.merge(s.p.environment) { _, new in new }
        let pasted = try await z.shell("printf '%s\\n' '\(callback)' | '\(ZonefeedBinary.path)' login '\(s.file)' --paste")
        #expect(pasted.status == 0, "\(pasted.stderr)")
        let run = try await s.run()
        #expect(run.status == 0, "the stored sign-in wins over the configured token whose session ended: \(run.stderr)")
        #expect(try await s.liveDifferences() == [])
    }
}

struct LoginTestError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
