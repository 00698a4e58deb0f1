import CloudKitModel
import Foundation

/// Authentication: the API token, the web auth tokens the server issued and which of them it
/// still accepts (`--token-window`, `--token-retirement`), and the token each answer rotates to.
extension FakeCloudKitStore {
    enum Authentication {
        case accepted(rotatedToken: String)
        case refused(Reply)
    }

    /// Checks the API token and web auth token of a request and, when they are good, issues the
    /// next web auth token. `origin` is how the client reached the server: the sign-in page's
    /// address in a 421 is there.
    func authenticate(apiToken: String?, webAuthToken: String?, origin: String = "http://127.0.0.1") -> Authentication {
        guard let apiToken, apiToken == configuration.apiToken else {
            return .refused(.error(401, "AUTHENTICATION_FAILED", apiToken == nil ? "missing ckAPIToken" : "unknown API token (ckAPIToken)"))
        }
        guard let webAuthToken, !webAuthToken.isEmpty else {
            return .refused(
                .error(
                    421, "AUTHENTICATION_REQUIRED", "request needs a user context: sign in and pass ckWebAuthToken",
                    redirectURL: signInAddress(origin: origin)))
        }
        let isRotated = isAcceptedRotatedToken(webAuthToken)
        if isRotated, let position = tokenPositions[webAuthToken] { newestUsedPosition = max(newestUsedPosition, position) }
        guard isRotated || initialTokens.contains(webAuthToken) else {
            if everIssued.contains(webAuthToken) || retiredTokens.contains(webAuthToken) {
                traffic.staleTokenRefusals += 1
                if staleTokenStatus == 421 {
                    return .refused(
                        .error(
                            421, "AUTHENTICATION_REQUIRED", "web auth token (ckWebAuthToken) is no longer valid: sign in again",
                            redirectURL: signInAddress(origin: origin)))
                }
            }
            return .refused(.error(401, "AUTHENTICATION_FAILED", "web auth token (ckWebAuthToken) is unknown, expired or revoked"))
        }
        // A session ends however often its token rotates, as CloudKit's do.
        if sessionHasEnded(for: webAuthToken) { return .refused(sessionEndedReply(origin: origin)) }
        if isRotated, configuration.tokenWindow != nil, !initialTokens.isEmpty {
            // "The previous token becomes invalid": a session that has moved on to a rotated
            // token cannot go back to the one it signed in with.
            retiredTokens.formUnion(initialTokens)
            initialTokens = []
        }
        let rotated = issueToken()
        inheritSession(from: webAuthToken, to: rotated)
        return .accepted(rotatedToken: rotated)
    }

    /// Whether `token` is one the server issued and still accepts: any of them, or with a
    /// `tokenWindow` of N, one of the newest N issued (`tokenRetirement` `.onIssue`) or, when
    /// retired on use, one of the N ending with the newest token used, or a later one.
    func isAcceptedRotatedToken(_ token: String) -> Bool {
        guard configuration.tokenWindow != nil else { return everIssued.contains(token) }
        guard let position = tokenPositions[token] else { return false }
        return position >= oldestAcceptedPosition
    }

    /// With a `tokenWindow`: tokens issued before this position are no longer accepted.
    var oldestAcceptedPosition: Int {
        let window = configuration.tokenWindow ?? 1
        switch configuration.tokenRetirement {
        case .onIssue: return nextTokenPosition - window
        case .onUse: return newestUsedPosition - window + 1
        }
    }

    func issueToken() -> String {
        // 32 random bytes: 44 base64 characters ending in `=`, with `+` and `/` more often than
        // not, as in real tokens, so a client that does not URL-encode them is caught. The
        // prefix (with its `+`) makes the fake's tokens easy to recognise.
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let token = "fake+" + Base64.encode(bytes)
        everIssued.insert(token)
        if configuration.tokenWindow != nil {
            tokenPositions[token] = nextTokenPosition
            nextTokenPosition += 1
            if tokenPositions.count > 256 {
                let oldest = oldestAcceptedPosition
                tokenPositions = tokenPositions.filter { $0.value >= oldest }
            }
        }
        return token
    }
}
