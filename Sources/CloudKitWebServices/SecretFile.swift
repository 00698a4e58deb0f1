#if canImport(Glibc)
    import Glibc
    private let systemRead = Glibc.read
    private let systemWrite = Glibc.write
#elseif canImport(Musl)
    import Musl
    private let systemRead = Musl.read
    private let systemWrite = Musl.write
#elseif canImport(Darwin)
    import Darwin
    private let systemRead = Darwin.read
    private let systemWrite = Darwin.write
#endif

/// Reads a file that holds a secret, the way libpq treats a password file and OpenSSH a key:
/// the file is opened without following a symbolic link (a link planted where the file should
/// be would otherwise send another file's first line to the server as a token), must be a
/// regular file that belongs to the user running zonefeed (or to root), must not be readable or
/// writable by group or others, and is read only up to `maxBytes`. Anything else is refused with
/// a sentence that says what to do; the sentence never quotes the file's contents. And writes
/// one: a new file, its owner's alone from the start.
public enum SecretFile {
    public struct Refusal: Error, Sendable, CustomStringConvertible {
        public var path: String
        var what: String
        public var problem: String
        /// Writing: the file was there already.
        public var exists = false
        /// Writing: the folder it goes in is not there.
        public var missingFolder = false
        var verb = "read"
        public var description: String { "the \(what) \(path) was not \(verb): \(problem)" }
    }

    /// Creates `path`, readable and writable by its owner alone, and writes `text` to it: never
    /// over a file that is there (nor through a symbolic link), and never readable by others,
    /// even for a moment. With `syncing`, the text is on the disk when this returns. A file left
    /// part written is removed.
    public static func create(_ path: String, holding text: String, what: String, syncing: Bool) throws(Refusal) {
        func refuse(_ problem: String, exists: Bool = false) -> Refusal {
            Refusal(path: path, what: what, problem: problem, exists: exists, verb: "written")
        }
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            let failure = errno
            var refusal = refuse(failure == EEXIST ? "it already exists" : String(cString: strerror(failure)), exists: failure == EEXIST)
            refusal.missingFolder = failure == ENOENT
            throw refusal
        }
        var written = false
        defer {
            close(fd)
            if !written { unlink(path) }
        }
        // The umask may have taken bits away, never added any; the mode is made exact anyway.
        guard fchmod(fd, 0o600) == 0 else { throw refuse(String(cString: strerror(errno))) }
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let count = bytes.withUnsafeBytes { systemWrite(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw refuse(String(cString: strerror(errno)))
            }
            bytes = bytes.dropFirst(count)
        }
        if syncing, fsync(fd) != 0 { throw refuse("it could not be written to the disk: \(String(cString: strerror(errno)))") }
        written = true
    }

    /// The file's text; nil when there is no file at `path`.
    public static func read(_ path: String, what: String, maxBytes: Int) throws(Refusal) -> String? {
        func refuse(_ problem: String) -> Refusal { Refusal(path: path, what: what, problem: problem) }
        // > open(2), O_NOFOLLOW: "If the trailing component (i.e., basename) of pathname is a
        // > symbolic link, then the open fails, with the error ELOOP." O_NONBLOCK keeps a FIFO
        // > planted there from holding the run up; it is refused below as not a regular file.
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else {
            switch errno {
            case ENOENT, ENOTDIR: return nil
            case ELOOP: throw refuse("it is a symbolic link, and a file holding a secret is not read through one; point the setting at the file itself")
            default: throw refuse("\(String(cString: strerror(errno))); check that it can be read by the user running zonefeed")
            }
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw refuse(String(cString: strerror(errno))) }
        guard info.st_mode & S_IFMT == S_IFREG else { throw refuse("it is not a regular file") }
        let user = geteuid()
        guard info.st_uid == user || info.st_uid == 0 else {
            throw refuse("it belongs to user \(info.st_uid), not to the user running zonefeed (\(user)); a secret is read only from one's own files")
        }
        let mode = info.st_mode & 0o777
        guard mode & 0o077 == 0 else {
            throw refuse(
                "group or others may access it (mode \(String(mode, radix: 8))), and it holds a secret; "
                    + "run chmod 600 \(path), and sign in again if others may have read it")
        }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while bytes.count <= maxBytes {
            let count = buffer.withUnsafeMutableBytes { systemRead(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw refuse(String(cString: strerror(errno)))
            }
            if count == 0 { break }
            bytes.append(contentsOf: buffer[0..<count])
        }
        guard bytes.count <= maxBytes else { throw refuse("it is larger than \(maxBytes) bytes, far more than it ever holds") }
        guard let text = String(validating: bytes, as: UTF8.self) else { throw refuse("it is not UTF-8 text") }
        return text
    }
}
