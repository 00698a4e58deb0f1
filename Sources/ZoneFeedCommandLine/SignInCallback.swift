import CloudKitWebServices
import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import ServiceLifecycle
import Synchronization

/// What the browser brings back to the sign-in callback, or what a person pastes: the address
/// CloudKit sent the browser to after the sign-in page.
enum SignInCallback: Sendable, Equatable {
    /// `ckWebAuthToken`: a secret, never printed.
    case token(String)
    /// No token: the sign-in was cancelled or refused (`error`, as the fake server says; real
    /// CloudKit's words are not documented), or the address is not the callback's.
    case noToken(error: String?)

    /// The most of an address read: a web auth token is a few hundred bytes.
    static let maxAddressBytes = 64 * 1024

    /// The callback's query, or a whole address (its query, or a fragment holding
    /// `ckWebAuthToken`, where a `postMessage`-style page may put it).
    init(address: String) {
        let text = address.trimmingCharacters(in: .whitespacesAndNewlines)
        var parts: [Substring] = []
        if let question = text.firstIndex(of: "?") {
            let query = text[text.index(after: question)...]
            parts.append(query.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? query)
        }
        if let hash = text.firstIndex(of: "#") { parts.append(text[text.index(after: hash)...]) }
        if parts.isEmpty { parts.append(Substring(text)) }
        var fields: [String: String] = [:]
        for part in parts {
            for pair in part.split(separator: "&") {
                let pieces = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let name = Self.percentDecoded(pieces[0])
                if fields[name] == nil { fields[name] = pieces.count > 1 ? Self.percentDecoded(pieces[1]) : "" }
            }
        }
        if let token = fields["ckWebAuthToken"], CloudKitClient.isWebAuthToken(token) {
            self = .token(token)
        } else if let token = fields["ckWebAuthToken"], token.utf8.count > CloudKitClient.maxWebAuthTokenBytes {
            let most = CloudKitClient.maxWebAuthTokenBytes
            self = .noToken(
                error: "the address's ckWebAuthToken is \(token.utf8.count) bytes long, and a token is a few hundred (at most \(most)); "
                    + "copy the address again, whole and alone")
        } else if fields["ckWebAuthToken"] != nil {
            self = .noToken(error: "the address's ckWebAuthToken is empty or not a token")
        } else {
            self = .noToken(error: fields["error"] ?? fields["ckError"])
        }
    }

    /// `%XX` as bytes; a `+` stays a `+` (base64 tokens hold them, and a token has no spaces).
    static func percentDecoded(_ text: Substring) -> String {
        let utf8 = Array(text.utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count)
        var i = 0
        while i < utf8.count {
            if utf8[i] == UInt8(ascii: "%"), i + 2 < utf8.count, let hi = hexValue(utf8[i + 1]), let lo = hexValue(utf8[i + 2]) {
                bytes.append(hi << 4 | lo)
                i += 3
            } else {
                bytes.append(utf8[i])
                i += 1
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}

/// The loopback listener of `zonefeed login` (RFC 8252 §7.3): 127.0.0.1 only, each request to
/// `/callback` is handed on as it comes, and the browser is told what became of it. Anything else
/// (a favicon) is answered 404.
///
/// CloudKit's sign-in carries no `state` that would tie the browser's return to this sign-in, so
/// anyone on this machine (or a web page in its browser) can send a request to the callback. The
/// listener keeps the port until a sign-in is taken or the time is up: had it stopped at the
/// first request, a forged one would have let another local process take the port and catch the
/// real token when the browser came back.
struct SignInCallbackListener {
    /// The documented default, so that the callback set in CloudKit Dashboard stays the same:
    /// `http://127.0.0.1:8790/callback`.
    static let defaultPort = 8790
    static let portRange = 1...65_535
    /// Callbacks waiting their turn: a flood of requests holds no more.
    static let waitingCallbacks = 16

    let port: Int

    var url: String { "http://127.0.0.1:\(port)/callback" }

    /// Listens, runs `onListening` once bound (print the address, open the browser), and hands
    /// `take` each callback in turn until it returns a result, or no more come within `timeout`
    /// (nil; a callback being taken is not cut short). Throws `ListenError` when the port cannot
    /// be had, and what `take` throws. The page reaches the browser before the listener stops.
    func waitForSignIn<T>(
        timeout: Duration, logger: Logger, onListening: @escaping @Sendable () async -> Void, take: (SignInCallback) async throws -> T?
    ) async throws -> T? {
        // The oldest are kept: a flood of callbacks must not push out the browser's, which came
        // first; one that finds no room is told to come again (a reload sends the same address).
        let (callbacks, arrived) = AsyncStream.makeStream(of: SignInCallback.self, bufferingPolicy: .bufferingOldest(Self.waitingCallbacks))
        let turnedAway = Atomic(0)
        let router = Router()
        router.get("callback") { request, _ -> Response in
            let query = request.uri.query ?? ""
            let callback =
                query.utf8.count > SignInCallback.maxAddressBytes
                ? SignInCallback.noToken(error: "the callback's address is longer than a sign-in's") : SignInCallback(address: "?" + query)
            let (status, page): (HTTPResponse.Status, String)
            switch arrived.yield(callback) {
            case .enqueued: (status, page) = (.ok, Self.page(for: callback))
            case .dropped:
                (status, page) = (.serviceUnavailable, Self.busyPage)
                // Said once: the person at the terminal learns why a browser may be asked to
                // reload, and that the callbacks may not all be theirs.
                if turnedAway.add(1, ordering: .relaxed).newValue == 1 {
                    logger.warning(
                        "more sign-in callbacks came than \(Self.waitingCallbacks) can wait to be checked; the ones past them are turned away and told to reload (so many may not all be your browser's)"
                    )
                }
            case .terminated: (status, page) = (.serviceUnavailable, Self.endedPage)
            @unknown default: (status, page) = (.serviceUnavailable, Self.endedPage)
            }
            return Response(
                status: status, headers: [.contentType: "text/html; charset=utf-8", .cacheControl: "no-store"],
                body: .init(byteBuffer: ByteBuffer(string: page)))
        }
        var quiet = logger
        quiet.logLevel = .error
        // A browser's request comes whole at once: connections that linger or trickle are
        // closed, and no more are taken than a small listener's.
        let app = Application(
            router: router, server: RequestDeadline.boundedHTTP1,
            configuration: .init(
                address: .hostname("127.0.0.1", port: port), serverName: "zonefeed-login",
                availableConnectionsDelegate: MaximumAvailableConnections(RequestDeadline.connections)),
            onServerRunning: { _ in await onListening() }, logger: quiet)
        let group = ServiceGroup(configuration: .init(services: [app], logger: quiet))
        let failure = ServerFailure()

        return try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask {
                do {
                    try await group.run()
                } catch {
                    failure.reason.withLock { $0 = "\(error)" }
                }
                // A server that could not listen, or has stopped: no callback comes any more.
                arrived.finish()
            }
            tasks.addTask {
                try? await Task.sleep(for: timeout)
                arrived.finish()
            }
            var result: T?
            do {
                for await callback in callbacks {
                    if let taken = try await take(callback) {
                        result = taken
                        break
                    }
                }
            } catch {
                arrived.finish()
                await Self.stop(group, tasks: &tasks)
                throw error
            }
            arrived.finish()
            await Self.stop(group, tasks: &tasks)
            if result == nil, let reason = failure.reason.withLock({ $0 }) { throw ListenError(port: port, reason: reason) }
            return result
        }
    }

    /// Why the server stopped, when it failed: said once no callback is left to take.
    private final class ServerFailure: Sendable {
        let reason = Mutex<String?>(nil)
    }

    /// A graceful shutdown lets the last page reach the browser, within 10 s.
    private static func stop(_ group: ServiceGroup, tasks: inout ThrowingTaskGroup<Void, any Error>) async {
        await group.triggerGracefulShutdown()
        tasks.addTask { try await Task.sleep(for: .seconds(10)) }
        _ = try? await tasks.next()
        tasks.cancelAll()
    }

    struct ListenError: Error, CustomStringConvertible {
        var port: Int
        var reason: String
        var description: String {
            "cannot listen on 127.0.0.1:\(port) for the sign-in callback (\(reason)): free the port, or pass --callback-port N "
                + "and set http://127.0.0.1:N/callback as the API token's sign-in callback in CloudKit Dashboard"
        }
    }

    /// The page the browser shows at the callback: never the token.
    static func page(for callback: SignInCallback) -> String {
        let (title, text): (String, String)
        switch callback {
        case .token:
            title = "Sign-in received"
            text = "zonefeed has the sign-in and is checking it with CloudKit; the terminal says whether it was taken. You may close this tab."
        case .noToken(let error):
            title = "Sign-in did not complete"
            text =
                "The sign-in did not complete\(error.map { " (\(htmlEscaped($0)))" } ?? ""); zonefeed stored nothing, and waits for "
                + "a sign-in until its time is up: sign in again at the address it printed, or stop it in the terminal."
        }
        return html(title: title, text: text)
    }

    /// A page of one heading and one paragraph, as the callback's pages are.
    static func html(title: String, text: String) -> String {
        """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><title>zonefeed: \(title)</title></head>
        <body><h1 id="result">\(title)</h1><p>\(text)</p></body></html>

        """
    }

    /// The page of a callback that found every place taken (a flood of them, from another
    /// program or page): the sign-in is in this page's address, and a reload brings it again.
    static let busyPage = html(
        title: "Busy",
        text: "zonefeed has more sign-in callbacks waiting than it takes at once (another program or page may be sending them), and "
            + "has not taken this one: reload this page in a moment to hand it the sign-in again.")

    /// The page of a callback that came once login had stopped waiting (its time up, or a
    /// sign-in taken): a reload cannot help.
    static let endedPage = html(
        title: "Not waiting", text: "zonefeed login is no longer waiting for a sign-in, and has not taken this one: run it again to sign in.")

    static func htmlEscaped(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;", options: .literal).replacingOccurrences(of: "<", with: "&lt;", options: .literal)
            .replacingOccurrences(of: ">", with: "&gt;", options: .literal).replacingOccurrences(of: "\"", with: "&quot;", options: .literal)
    }
}
