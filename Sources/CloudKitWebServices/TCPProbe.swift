import NIOCore
import NIOPosix

/// Whether a TCP connection to a host can be made, on its own. AsyncHTTPClient reports a TLS
/// handshake that never ends as `connectTimeout` as often as `tlsHandshakeTimeout` (one deadline
/// covers both), so after a connect timeout to an HTTPS origin the client asks this: a server
/// that accepts a bare connection at once was stuck in the handshake (not retried), and one that
/// does not is a network fault (retried).
enum TCPProbe {
    /// `host:port` of an origin such as `https://api.apple-cloudkit.com` or
    /// `https://[::1]:8443`; the scheme's port when none is written.
    static func endpoint(ofOrigin origin: String) -> (host: String, port: Int)? {
        guard let schemeEnd = origin.range(of: "://") else { return nil }
        let scheme = origin[..<schemeEnd.lowerBound]
        var authority = Substring(origin[schemeEnd.upperBound...])
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        let defaultPort = scheme == "https" ? 443 : 80
        if authority.hasPrefix("["), let close = authority.firstIndex(of: "]") {
            let host = String(authority[authority.index(after: authority.startIndex)..<close])
            let rest = authority[authority.index(after: close)...]
            return (host, rest.hasPrefix(":") ? Int(rest.dropFirst()) ?? defaultPort : defaultPort)
        }
        let parts = authority.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        guard let host = parts.first, !host.isEmpty else { return nil }
        return (String(host), parts.count > 1 ? Int(parts[1]) ?? defaultPort : defaultPort)
    }

    /// True when a TCP connection to `origin` is made within `timeout`; it is closed at once.
    static func connects(toOrigin origin: String, within timeout: TimeAmount) async -> Bool {
        guard let (host, port) = endpoint(ofOrigin: origin) else { return false }
        do {
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connectTimeout(timeout)
                .connect(host: host, port: port).get()
            try? await channel.close()
            return true
        } catch {
            return false
        }
    }
}
