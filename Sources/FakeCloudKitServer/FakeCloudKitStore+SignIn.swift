import CloudKitModel
import Foundation

extension FakeCloudKitServer.Configuration {
    /// The fake's browser sign-in (`cloudkit-web-services.md` §5.1) and how long its sessions
    /// last. A request without a web auth token is answered 421 `AUTHENTICATION_REQUIRED` with a
    /// `redirectURL` to the server's own `/signin` page (unless `redirectURL` names another); the
    /// page signs the fake user in and sends the browser to `callbackURL` with `ckWebAuthToken`.
    public struct SignIn: Sendable {
        /// Where the page sends the browser after a sign-in: a real container's API token has it
        /// set in CloudKit Dashboard ("sign-in callback"). `zonefeed login` listens there by
        /// default. An admin call (`auth/sign-in {callback}`) can change it.
        public var callbackURL = "http://127.0.0.1:8790/callback"
        /// How long a session is accepted after its sign-in: the token signed in for and every
        /// token rotated from it; the configured tokens' session starts with the server. nil:
        /// for ever. Apple's is 30 minutes...
        public var sessionLifetime: Duration?
        /// ...or two weeks when the person ticks "Keep me signed in". nil: for ever.
        public var longSessionLifetime: Duration?

        public init(callbackURL: String = "http://127.0.0.1:8790/callback", sessionLifetime: Duration? = nil, longSessionLifetime: Duration? = nil) {
            self.callbackURL = callbackURL
            self.sessionLifetime = sessionLifetime
            self.longSessionLifetime = longSessionLifetime
        }
    }
}

/// The sessions behind the web auth tokens, and the sign-in page's switches.
struct SignInState: Sendable {
    struct Session: Sendable {
        var started: ContinuousClock.Instant
        var lifetime: Duration?
    }

    /// Session 0 is the configured tokens' (and those granted by `auth/grant`): it starts with
    /// the server and lasts `sessionLifetime`. Sign-ins open the others.
    let serverStarted = ContinuousClock.now
    var sessions: [Int: Session] = [:]
    /// The session of each token issued in one opened by a sign-in; any other token is in 0.
    var sessionOf: [String: Int] = [:]
    var nextSession = 1
    /// Set by `auth/sign-in`.
    var callbackOverride: String?
    var refuses = false
    /// Added to every session's age by `auth/sign-in {elapseSeconds}`: a test ends a session
    /// without waiting out its lifetime, whatever the load on the machine.
    var elapsed = Duration.zero
    var signIns = 0
    var cancelled = 0
    var refused = 0
    var endedSessionRefusals = 0
}

/// The sign-in page (`GET /signin`, `POST /signin`) and the sessions.
extension FakeCloudKitStore {
    /// The page's address, as a 421 gives it: on this server, as the client reached it.
    func signInAddress(origin: String) -> String {
        configuration.redirectURL ?? "\(origin)/signin?container=\(Self.formEncode(configuration.container))"
    }

    /// Whether the session `token` belongs to has outlived its lifetime.
    func sessionHasEnded(for token: String) -> Bool {
        let id = signIn.sessionOf[token] ?? 0
        let session =
            id == 0 ? SignInState.Session(started: signIn.serverStarted, lifetime: configuration.signIn.sessionLifetime) : signIn.sessions[id]
        guard let session, let lifetime = session.lifetime else { return false }
        return ContinuousClock.now - session.started + signIn.elapsed >= lifetime
    }

    /// A token issued in answer to `used` belongs to `used`'s session.
    func inheritSession(from used: String, to issued: String) {
        if let id = signIn.sessionOf[used] { signIn.sessionOf[issued] = id }
    }

    /// The 421 of a request whose session has ended, as CloudKit answers when one does.
    func sessionEndedReply(origin: String) -> Reply {
        signIn.endedSessionRefusals += 1
        return .error(
            421, "AUTHENTICATION_REQUIRED", "the session has ended: sign in again", redirectURL: signInAddress(origin: origin))
    }

    /// `GET /signin`: the form. `POST /signin`: a sign-in, refused or cancelled, answered with a
    /// 303 to the callback: `ckWebAuthToken=<a new token>` (percent-encoded), or `error=cancelled`
    /// or `error=refused`.
    func handleSignIn(method: String, form: [String: String]) -> Reply {
        let callback = signIn.callbackOverride ?? configuration.signIn.callbackURL
        switch method {
        case "GET", "HEAD":
            return Reply(status: 200, body: Array(signInPage(callback: callback).utf8), contentType: "text/html; charset=utf-8")
        case "POST":
            break
        default:
            return Reply(status: 405, body: Array("GET or POST\n".utf8), contentType: "text/plain; charset=utf-8")
        }
        let separator = callback.contains("?") ? "&" : "?"
        if form["action"] == "cancel" {
            signIn.cancelled += 1
            return Self.seeOther(callback + separator + "error=cancelled")
        }
        if signIn.refuses {
            signIn.refused += 1
            return Self.seeOther(callback + separator + "error=refused")
        }
        let keep = form["keep"] != nil
        let id = signIn.nextSession
        signIn.nextSession += 1
        let lifetime = keep ? configuration.signIn.longSessionLifetime : configuration.signIn.sessionLifetime
        signIn.sessions[id] = SignInState.Session(started: .now, lifetime: lifetime)
        let token = issueToken()
        signIn.sessionOf[token] = id
        signIn.signIns += 1
        return Self.seeOther(callback + separator + "ckWebAuthToken=" + Self.formEncode(token))
    }

    /// `auth/sign-in {callback?, refuse?, elapseSeconds?}`: where the page sends the browser,
    /// whether it refuses every sign-in, and time that passes for every session at once.
    func configureSignIn(callback: String?, refuse: Bool?, elapseSeconds: Int?) -> Reply {
        if let callback {
            guard callback.hasPrefix("http://") || callback.hasPrefix("https://") else {
                return .adminError("auth/sign-in: callback must be an http:// or https:// URL")
            }
            signIn.callbackOverride = callback
        }
        if let refuse { signIn.refuses = refuse }
        if let elapseSeconds {
            guard (0...31_536_000).contains(elapseSeconds) else {
                return .adminError("auth/sign-in: elapseSeconds must be from 0 to 31536000 (a year), not \(elapseSeconds)")
            }
            signIn.elapsed += .seconds(elapseSeconds)
        }
        return .admin(
            .object([
                "ok": .bool(true), "callback": .string(signIn.callbackOverride ?? configuration.signIn.callbackURL),
                "refuse": .bool(signIn.refuses), "signIns": .int(Int64(signIn.signIns)), "cancelled": .int(Int64(signIn.cancelled)),
                "refused": .int(Int64(signIn.refused)), "endedSessionRefusals": .int(Int64(signIn.endedSessionRefusals)),
                "elapsedSeconds": .int(signIn.elapsed.components.seconds),
            ]))
    }

    private func signInPage(callback: String) -> String {
        """
        <!doctype html>
        <html lang="en">
        <head><meta charset="utf-8"><title>Sign in to CloudKit (fake)</title></head>
        <body>
        <h1>Sign in to CloudKit (fake)</h1>
        <p>Container <code>\(Self.htmlEscaped(configuration.container))</code>: sign in as
        <code>\(Self.htmlEscaped(userRecordName))</code>. You will be sent back to
        <code>\(Self.htmlEscaped(callback))</code>.</p>
        <form method="post" action="/signin">
        <p><label><input type="checkbox" id="keep-signed-in" name="keep" value="1"> Keep me signed in</label></p>
        <p><button type="submit" id="sign-in" name="action" value="sign-in">Sign in</button>
        <button type="submit" id="cancel" name="action" value="cancel">Cancel</button></p>
        </form>
        </body>
        </html>

        """
    }

    static func seeOther(_ location: String) -> Reply {
        Reply(status: 303, body: Array("see \(location)\n".utf8), contentType: "text/plain; charset=utf-8", headers: [(name: "Location", value: location)])
    }

    /// Percent-encodes all but RFC 3986's unreserved characters (`+`, `/` and `=` included).
    static func formEncode(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                out += String(format: "%%%02X", byte)
            }
        }
        return out
    }

    static func htmlEscaped(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;", options: .literal).replacingOccurrences(of: "<", with: "&lt;", options: .literal)
            .replacingOccurrences(of: ">", with: "&gt;", options: .literal).replacingOccurrences(of: "\"", with: "&quot;", options: .literal)
    }
}
