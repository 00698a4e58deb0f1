import Crypto
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The file that keeps a pipeline's web auth tokens between runs, mode 0600:
///
///     <the newest token>
///     earlier=<a token received before it>
///     configured-token-sha256=<16 hex digits>
///     requests=one-at-a-time
///     user=<the userRecordName users/caller answered at sign-in>
///     signed-in-at=<Unix seconds>
///     rotated-at=<Unix seconds>
///     used-at=<Unix seconds>
///
/// `earlier` lines hold the tokens received just before the newest, newest first: with requests
/// in flight together, the token received last is not always the one the server issued last.
/// The fingerprint of the configured token tells a later run whether a person has signed in again
/// since (a new configured token then wins over the saved ones). `requests=one-at-a-time` says
/// the server refused a token that concurrent requests had overtaken, so requests go one at a
/// time. `user` and `signed-in-at` are written by `zonefeed login`; `rotated-at` is when the
/// newest token arrived (from a sign-in or a response), `used-at` when CloudKit last answered a
/// request that carried a saved token: what `zonefeed status` and the metrics tell. Older
/// versions ignore these lines. A file of one line, as older versions wrote, is a token alone.
struct WebAuthTokenFile: WebAuthTokenVault {
    struct Contents: Sendable, Equatable {
        /// Newest first.
        var tokens: [String] = []
        var configuredFingerprint: String?
        var oneAtATime = false
        /// Who signed in (`users/caller`), when known; never a token.
        var userRecordName: String?
        var signedInAt: Date?
        var rotatedAt: Date?
        var usedAt: Date?

        /// A `key=value` line after the first.
        mutating func take(key: String, value: String) {
            switch key {
            case "earlier": if !value.isEmpty { tokens.append(value) }
            case "configured-token-sha256": configuredFingerprint = value
            case "requests": oneAtATime = value == "one-at-a-time"
            case "user": userRecordName = WebAuthTokenFile.userRecordName(value)
            case "signed-in-at": signedInAt = WebAuthTokenFile.date(value)
            case "rotated-at": rotatedAt = WebAuthTokenFile.date(value)
            case "used-at": usedAt = WebAuthTokenFile.date(value)
            default: break  // written by a newer version; ignored
            }
        }
    }

    let path: String
    /// The folder the file is in, and the start of its temporary files' names there, worked
    /// out once: from the path's Characters at every save, they were 0.1% of a run over HTTP
    /// (perf), which saves once an answer.
    let folder: String
    private let temporaryPrefix: String

    init(path: String) {
        self.path = path
        // Split at the last slash's byte, as the system splits it (a slash followed by a
        // combining mark is one Character with it).
        let bytes = path.utf8
        let slash = bytes.lastIndex(of: UInt8(ascii: "/"))
        folder = slash.map { $0 == bytes.startIndex ? "/" : String(decoding: bytes[..<$0], as: UTF8.self) } ?? "."
        let name = slash.map { String(decoding: bytes[bytes.index(after: $0)...], as: UTF8.self) } ?? path
        temporaryPrefix = "\(folder)/.\(name).\(getpid())."
    }

    var location: String { path }

    /// The most a token file holds: twenty tokens of a few hundred bytes and a few lines more.
    static let maxBytes = 256 * 1024
    /// The longest line taken as a token; a web auth token is a few hundred bytes.
    static let maxTokenBytes = 16 * 1024

    /// The file's text; nil when it does not exist. The file holds secrets: it is read as
    /// `SecretFile` reads (no symbolic link, the user's own, mode 0600 or stricter, bounded).
    func load() throws -> String? {
        let text: String?
        do {
            text = try SecretFile.read(path, what: "web auth token file", maxBytes: Self.maxBytes)
        } catch {
            throw WebAuthTokenFileError(.read, path: path, problem: error.problem)
        }
        if let text, let long = Self.longestLine(of: text), long > Self.maxTokenBytes {
            throw WebAuthTokenFileError(
                .read, path: path, problem: "it holds a line of \(long) bytes, and a web auth token is a few hundred; it is not a token file")
        }
        return text
    }

    /// The bytes of the text's longest line; nil when it has none.
    static func longestLine(of text: String) -> Int? {
        // ASCII text, as zonefeed writes it, in one pass over its bytes, between the newlines
        // `ASCIILines` splits at. Splitting it into an array of lines first was 0.3% of a run
        // over HTTP (perf), where the file is read at every save.
        var text = text
        let ascii = text.withUTF8 { bytes -> Int?? in
            var longest: Int?
            var run = 0
            for byte in bytes {
                if byte >= 0x80 { return .none }
                if ASCIILines.isNewline(byte) {
                    if run > 0 { longest = max(longest ?? 0, run) }
                    run = 0
                } else {
                    run += 1
                }
            }
            if run > 0 { longest = max(longest ?? 0, run) }
            return .some(longest)
        }
        if let ascii { return ascii }
        return text.split(whereSeparator: \.isNewline).map(\.utf8.count).max()
    }

    /// What the file holds; nil when it does not exist or holds no token.
    func read() -> Contents? {
        (try? load()).flatMap(Self.contents(of:))
    }

    /// The tokens a saved text holds; nil when it holds none.
    static func contents(of text: String) -> Contents? {
        guard let ascii = ASCIILines(text) else { return contentsOfAnyText(text) }
        // Every file zonefeed writes: read from its bytes. Foundation's trimming bridged each
        // line to UTF-16, and the file is read again at every rotation of the token (every
        // answer): 6% of a run's CPU over loopback HTTP in a perf profile (docs/performance.md).
        var contents = Contents()
        for (index, line) in ascii.lines.enumerated() {
            let trimmed = ASCIILines.trimming(line, ASCIILines.isWhitespaceOrNewline)
            if index == 0 {
                if !trimmed.isEmpty { contents.tokens.append(ASCIILines.string(trimmed)) }
                continue
            }
            guard let equals = trimmed.firstIndex(of: UInt8(ascii: "=")) else { continue }
            let key = ASCIILines.string(ASCIILines.trimming(trimmed[..<equals], ASCIILines.isWhitespace))
            let value = ASCIILines.string(ASCIILines.trimming(trimmed[(equals + 1)...], ASCIILines.isWhitespace))
            contents.take(key: key, value: value)
        }
        return contents.tokens.isEmpty ? nil : contents
    }

    /// `contents(of:)` for any text, read by Characters and Foundation's character sets: the
    /// way for text that is not all ASCII, and the oracle the ASCII way is held against
    /// (FuzzTokenFile, WebAuthTokenStoreTests).
    static func contentsOfAnyText(_ text: String) -> Contents? {
        var contents = Contents()
        // Lines may end with CRLF (a file edited on Windows, or pasted): the CR is not the token's.
        for (index, raw) in text.split(whereSeparator: \.isNewline).enumerated() {
            let line = trimmed(raw, .whitespacesAndNewlines)
            if index == 0 {
                if !line.isEmpty { contents.tokens.append(line) }
                continue
            }
            // The first '=' as a character of its own, not as the start of a grapheme: a
            // token that begins with a combining mark joins the '=' before it into one
            // `Character`, and `earlier=<token>` would then split at a later '=', or not at all.
            let scalars = line.unicodeScalars
            guard let equals = scalars.firstIndex(of: "=") else { continue }
            // `earlier = token`, as a person may write it: the spaces are not the token's, as
            // they are not on the first line (a token sent with them is refused).
            let key = trimmed(String(scalars[..<equals]), .whitespaces)
            let value = trimmed(String(scalars[scalars.index(after: equals)...]), .whitespaces)
            contents.take(key: key, value: value)
        }
        return contents.tokens.isEmpty ? nil : contents
    }

    /// The text without `set` at its ends, scalar by scalar, then without the whole characters at
    /// its ends that are white space: a space followed by a combining mark is one `Character`,
    /// white space as a whole, which trimming scalars leaves at the end (the fuzzer's find).
    static func trimmed(_ text: some StringProtocol, _ set: CharacterSet) -> String {
        var text = text.trimmingCharacters(in: set)
        while text.last?.isWhitespace == true { text.removeLast() }
        while text.first?.isWhitespace == true { text.removeFirst() }
        return text
    }

    static func text(of contents: Contents) -> String {
        // Appended to one String made room for once, rather than lines joined: the file is
        // written at every save.
        var text = ""
        text.reserveCapacity(contents.tokens.reduce(256) { $0 + $1.utf8.count + 9 })
        func line(_ start: String, _ rest: String = "") {
            text += start
            text += rest
            text += "\n"
        }
        for (i, token) in contents.tokens.enumerated() {
            if i == 0 { line(token) } else { line("earlier=", token) }
        }
        if let fingerprint = contents.configuredFingerprint { line("configured-token-sha256=", fingerprint) }
        if contents.oneAtATime { line("requests=one-at-a-time") }
        if let user = contents.userRecordName.flatMap(Self.userRecordName) { line("user=", user) }
        for (key, date) in [("signed-in-at=", contents.signedInAt), ("rotated-at=", contents.rotatedAt), ("used-at=", contents.usedAt)] {
            // Whole seconds; a date a Double cannot hold as an Int64 (none a clock gives) is 0.
            if let date { line(key, String(Int64(exactly: date.timeIntervalSince1970.rounded(.down)) ?? 0)) }
        }
        // Nothing at all is still one line, as lines joined made it.
        return text.isEmpty ? "\n" : text
    }

    /// A user record name as the file keeps it: one line of at most 255 bytes without control
    /// characters or spaces at its ends; anything else (a server's odd answer) is not kept.
    static func userRecordName(_ text: String) -> String? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty, trimmed.utf8.count <= 255,
            !trimmed.unicodeScalars.contains(where: { $0.properties.generalCategory == .control || $0.properties.isWhitespace && $0 != " " })
        else { return nil }
        return trimmed
    }

    /// Unix seconds, as the file writes them; nil for anything else or a time past year 10000.
    static func date(_ text: String) -> Date? {
        guard let seconds = Int64(text), (0...253_402_300_799).contains(seconds) else { return nil }
        return Date(timeIntervalSince1970: TimeInterval(seconds))
    }

    /// The first 16 hex digits of the token's SHA-256: enough to notice a new sign-in, too few to
    /// tell anything about the token.
    static func fingerprint(of token: String) -> String {
        SHA256.hash(data: Data(token.utf8)).prefix(8).map { String(format: "%02x", $0) }.joined()
    }

    /// Writes a temporary file beside the target with mode 0600 and renames it over the target: a
    /// process killed at any moment leaves either the old contents or the new, never half, and no
    /// other user can ever read them. The new contents are in the page cache when this returns,
    /// which a killed process cannot lose; `sync()` makes them survive a power loss too.
    func write(_ contents: Contents) throws {
        try save(Self.text(of: contents))
    }

    func save(_ text: String) throws {
        let temporary = "\(temporaryPrefix)\(UInt32.random(in: 0...UInt32.max)).tmp"
        func create() throws(SecretFile.Refusal) {
            try SecretFile.create(temporary, holding: text, what: "web auth token file", syncing: false)
        }
        do {
            try create()
        } catch let refusal where refusal.missingFolder {
            // The folder is made when a save finds it missing, rather than looked for at every
            // save.
            do {
                try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw WebAuthTokenFileError(.write, path: path, problem: "its folder cannot be created")
            }
            do {
                try create()
            } catch {
                throw WebAuthTokenFileError(.write, path: path, problem: error.problem)
            }
        } catch {
            throw WebAuthTokenFileError(.write, path: path, problem: error.problem)
        }
        var renamed = false
        defer {
            if !renamed { unlink(temporary) }
        }
        guard rename(temporary, path) == 0 else { throw WebAuthTokenFileError(.write, path: path, problem: String(cString: strerror(errno))) }
        renamed = true
    }

    /// Flushes the file and the folder's entry for it to the disk. The file is opened as it is
    /// read (not through a link, without waiting): a run refused for a token file that is a FIFO
    /// went on to this at its end, and waited for ever for a writer to open it.
    func sync() {
        for (target, flags) in [(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK), (folder, O_RDONLY | O_DIRECTORY)] {
            let fd = open(target, flags | O_CLOEXEC)
            guard fd >= 0 else { continue }
            _ = fsync(fd)
            close(fd)
        }
    }
}
