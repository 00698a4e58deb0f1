import Foundation
import Logging
import NIOPosix
import Synchronization

// The browser sign-in (reference §5.1): a request with the API token alone is answered 421
// `AUTHENTICATION_REQUIRED` with a `redirectURL`; the person signs in there, and CloudKit sends
// the browser to the API token's sign-in callback with `ckWebAuthToken`. What happens in the
// browser, and how the callback is caught, is the program's (`zonefeed login`); the client asks
// for the address, checks the token it brings back and stores it where runs look first.
extension CloudKitClient {
    /// The longest web auth token zonefeed takes, from a sign-in, a pipeline file or an answer's
    /// rotation header; a token is a few hundred bytes. The token file keeps twenty of them, and
    /// must stay a file the next run reads (`WebAuthTokenFile.maxTokenBytes` a line, `maxBytes` in
    /// all): a longer one saved once stopped every later run until a person deleted the file.
    public static let maxWebAuthTokenBytes = 8 * 1024

    /// Whether `text` can be a web auth token: at most `maxWebAuthTokenBytes` of printable ASCII
    /// without spaces, as every token is (base64 and a few marks). Anything else is a proxy's or
    /// a hostile server's, or a paste gone wrong: a line separator in it (U+2028, say) made the
    /// token file read back as more lines than were written, a `user=` line among them.
    public static func isWebAuthToken(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= maxWebAuthTokenBytes && text.utf8.allSatisfy { (0x21...0x7E).contains($0) }
    }

    /// Where CloudKit sends a person to sign in: the `redirectURL` of the 421 that `users/caller`
    /// gets when sent with the API token alone. Throws the `CloudKitError` of any other answer
    /// (a wrong API token is 401), and `SignInError` when CloudKit answers without an address.
    public static func signInAddress(configuration: Configuration, logger: Logger) async throws -> String {
        var anonymous = configuration
        anonymous.webAuthToken = nil
        anonymous.webAuthTokenFile = nil
        anonymous.webAuthTokenVault = nil
        anonymous.serverKey = nil
        do {
            _ = try await withClient(configuration: anonymous, logger: logger) { try await $0.caller() }
        } catch let error as CloudKitError where error.code == .authenticationRequired || error.httpStatus == 421 {
            guard let address = error.redirectURL, !address.isEmpty else {
                throw SignInError("CloudKit asked for a sign-in (AUTHENTICATION_REQUIRED) but gave no address to sign in at (redirectURL)")
            }
            return address
        }
        throw SignInError(
            "CloudKit answered users/caller without a signed-in user: this API token needs no sign-in, or baseURL is not CloudKit Web Services")
    }

    /// Checks `token`, which a person has just signed in for, with `users/caller`, and stores it
    /// in the configured token store (`webAuthTokenVault`, else `webAuthTokenFile`) in place of
    /// every saved one, with who signed in and when. Returns the user.
    ///
    /// The token is checked from a store in memory, and reaches the configured one only once
    /// CloudKit has taken it (with its successor, when the answer rotated it), with the
    /// fingerprint of the configured `webAuthToken`: the next run takes the saved tokens over
    /// that configured one, which is the stale token a person signs in to replace. It was
    /// saved there first and the old text put back when CloudKit refused it: meanwhile a run
    /// or a pod starting read only a token that may be someone else's (a callback anyone on
    /// this machine can send), a Ctrl-C during the check left it there alone, and the text put
    /// back dropped what other processes sharing the store had saved in between. A process
    /// killed between the answer and the save loses the sign-in, which a person, there to sign
    /// in, does again. The store is read and written on NIO's pool for blocking work.
    public static func storeSignedInToken(_ token: String, configuration: Configuration, logger: Logger) async throws -> UserIdentity {
        guard let vault = configuration.webAuthTokenVault ?? configuration.webAuthTokenFile.map(WebAuthTokenFile.init(path:)) else {
            throw SignInError("the pipeline names no place to keep web auth tokens (auth.webAuthTokenFile or auth.webAuthTokenStore)")
        }
        let previous: String?
        do {
            previous = try await NIOThreadPool.singleton.runIfActive { try vault.load() }
        } catch {
            throw WebAuthTokenFileFailure(error: error, reading: true)
        }
        let saved = previous.flatMap(WebAuthTokenFile.contents(of:))
        let now = Date()
        let configured = configuration.webAuthToken.flatMap { $0.isEmpty ? nil : $0 }
        var contents = WebAuthTokenFile.Contents(
            tokens: [token], configuredFingerprint: configured.map(WebAuthTokenFile.fingerprint(of:)), oneAtATime: saved?.oneAtATime ?? false)
        contents.signedInAt = now
        contents.rotatedAt = now
        contents.usedAt = saved?.usedAt
        let checked = TokensBeingChecked(WebAuthTokenFile.text(of: contents), location: vault.location)
        var checking = configuration
        checking.webAuthTokenVault = checked
        let user = try await withClient(configuration: checking, logger: logger) { client in
            let user = try await client.caller(logger: logger)
            client.tokens.signedIn(as: user.userRecordName)
            return user
        }
        do {
            try await NIOThreadPool.singleton.runIfActive {
                try vault.save(checked.load() ?? "")
                vault.sync()
            }
        } catch {
            throw WebAuthTokenFileFailure(error: error, reading: false)
        }
        return user
    }

    /// Who signed in for the newest token, when, and when it last rotated, as the token store
    /// says; nil when it holds no token. Never a token.
    public static func webAuthTokenSummary(configuration: Configuration) throws -> WebAuthTokenSummary? {
        guard let vault = configuration.webAuthTokenVault ?? configuration.webAuthTokenFile.map(WebAuthTokenFile.init(path:)) else { return nil }
        do {
            return try vault.load().flatMap(WebAuthTokenFile.contents(of:)).map { WebAuthTokenSummary($0, location: vault.location) }
        } catch {
            throw WebAuthTokenFileFailure(error: error, reading: true)
        }
    }
}

/// What `zonefeed status` shows of a pipeline's web auth tokens: never a token.
public struct WebAuthTokenSummary: Sendable, Equatable {
    /// A path or a table.
    public var location: String
    /// The `userRecordName` `users/caller` answered at sign-in; nil for a token not obtained
    /// through `zonefeed login` (or saved by an older version).
    public var userRecordName: String?
    public var signedInAt: Date?
    /// When the newest token arrived, from a sign-in or a response.
    public var rotatedAt: Date?
    /// When CloudKit last answered a request that carried a saved token.
    public var usedAt: Date?

    init(_ contents: WebAuthTokenFile.Contents, location: String) {
        self.location = location
        userRecordName = contents.userRecordName
        signedInAt = contents.signedInAt
        rotatedAt = contents.rotatedAt
        usedAt = contents.usedAt
    }
}

/// A sign-in that cannot go on, as a sentence without secrets.
public struct SignInError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// The tokens of a sign-in being checked: the token store of the check's client, in memory
/// (see `storeSignedInToken`).
private final class TokensBeingChecked: WebAuthTokenVault {
    let location: String
    private let text: Mutex<String?>

    init(_ text: String, location: String) {
        self.text = Mutex(text)
        self.location = location
    }

    func load() -> String? { text.withLock { $0 } }

    func save(_ text: String) { self.text.withLock { $0 = text } }

    func update(_ change: (String?) throws -> String) throws {
        try text.withLock { $0 = try change($0) }
    }

    func sync() {}
}
