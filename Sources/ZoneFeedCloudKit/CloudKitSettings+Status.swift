import CloudKitWebServices
import Foundation
import NIOPosix
import ZoneFeed

/// What `zonefeed status` shows of a CloudKit source: what its token store says of the stored
/// web auth token (who signed in and when, when it last rotated, when a run last used it).
/// Never the token.
extension CloudKitSettings {
    public func statusLines(_ context: StatusContext) async -> [String] {
        let vault = auth.webAuthTokenStore == .database ? context.vault : nil
        let summary: WebAuthTokenSummary?
        do {
            var configuration = try CloudKitSource.clientConfiguration(for: self)
            configuration.webAuthTokenVault = vault.map(DestinationTokenVault.init)
            let reading = configuration
            // A file read, or a query through the vault: on NIO's pool for blocking work.
            summary = try await NIOThreadPool.singleton.runIfActive { try CloudKitClient.webAuthTokenSummary(configuration: reading) }
        } catch {
            return ["web auth token: cannot be read: \(InertText.escaped("\(error)"))"]
        }
        let login = context.command("login")
        guard let summary else {
            let place = vault?.location ?? auth.webAuthTokenFile ?? "the token file"
            return ["web auth token: none stored in \(InertText.escaped(place)) (to sign in: \(login))"]
        }
        func when(_ date: Date?) -> String {
            guard let date else { return "unknown" }
            return "\(Self.utc(date)) (\(Self.ago(context.now.timeIntervalSince(date))))"
        }
        let user = summary.userRecordName.map { "\($0), signed in \(when(summary.signedInAt))" } ?? "unknown (not signed in with \(login))"
        let rows = [("user", user), ("last rotated", when(summary.rotatedAt)), ("last used by a run", when(summary.usedAt))]
        return ["web auth token: \(InertText.escaped(summary.location))"]
            + rows.map { "  " + $0.0.padding(toLength: 20, withPad: " ", startingAt: 0) + InertText.escaped($0.1) }
    }

    static func utc(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss 'UTC'"
        return formatter.string(from: date)
    }

    /// `42 s ago`, `5 min ago`, `3 h ago`, `13 days ago`; `in 5 s` for a clock behind.
    static func ago(_ seconds: Double) -> String {
        guard seconds.isFinite else { return "unknown" }
        let magnitude = min(abs(seconds), 1e12)  // a date is at most year 10000: no conversion below can trap
        let text =
            magnitude < 120
            ? "\(Int(magnitude)) s"
            : magnitude < 7200 ? "\(Int(magnitude / 60)) min" : magnitude < 172_800 ? "\(Int(magnitude / 3600)) h" : "\(Int(magnitude / 86400)) days"
        return seconds >= 0 ? "\(text) ago" : "in \(text)"
    }
}
