import Foundation

/// How this program was started, so that a hint it prints (`Query it: … psql …`) runs as printed:
/// `swift run zonefeed` for a debug build started from its package's folder (what `swift run`
/// starts), the path it was started by when that is not on `PATH` (a release build among them:
/// `swift run` would build and start a debug one), plain `zonefeed` when it is.
enum Invocation {
    static var command: String {
        command(argv0: CommandLine.arguments.first ?? "zonefeed", currentDirectory: FileManager.default.currentDirectoryPath)
    }

    static func command(argv0: String, currentDirectory: String) -> String {
        guard argv0.contains("/") else { return "zonefeed" }  // found through PATH
        // `swift run` starts .build/<triple>/<configuration>/zonefeed from the package's folder.
        let parts = argv0.split(separator: "/")
        let debugBuild = parts.contains(".build") && parts.dropLast().last == "debug"
        if debugBuild && FileManager.default.fileExists(atPath: currentDirectory + "/Package.swift") {
            return "swift run zonefeed"
        }
        return shellWord(argv0)
    }

    /// A word the shell reads back as it is: single-quoted when it holds anything else than
    /// letters, digits and `/._-`.
    static func shellWord(_ word: String) -> String {
        let plain =
            !word.isEmpty
            && word.unicodeScalars.allSatisfy {
                ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || "/._-".unicodeScalars.contains($0)
            }
        return plain ? word : "'" + word.replacingOccurrences(of: "'", with: "'\\''", options: .literal) + "'"
    }
}
