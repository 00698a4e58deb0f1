import LibPQ

/// What `zonefeed --version` prints, for a bug report or an image label.
enum BuildInfo {
    static let version = "0.1.0"

    /// The commit this program was built from, when the build said: `docker/Dockerfile` and
    /// `docker/check-runtime.sh` write it here before building (`stamp-commit`); a plain
    /// `swift build` leaves it unknown.
    static let commit: String? = nil  // stamp-commit

    /// The compiler that built this program, as far as `#if compiler` tells.
    static var swiftVersion: String {
        #if compiler(>=6.4)
            return "6.4 or later"
        #elseif compiler(>=6.3)
            return "6.3"
        #elseif compiler(>=6.2)
            return "6.2"
        #elseif compiler(>=6.1)
            return "6.1"
        #else
            return "6.0"
        #endif
    }

    static var versionText: String {
        "zonefeed \(version)\ncommit \(commit ?? "unknown (built without docker/stamp-commit)")\nlibpq \(Connection.libraryVersion)\nSwift \(swiftVersion)"
    }
}
