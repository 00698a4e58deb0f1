#if canImport(Glibc)
    import Glibc
    private let systemRead = Glibc.read
#elseif canImport(Musl)
    import Musl
    private let systemRead = Musl.read
#elseif canImport(Darwin)
    import Darwin
    private let systemRead = Darwin.read
#endif

/// Reads a file that holds a secret, the way libpq treats a password file and OpenSSH a key:
/// the file is opened without following a symbolic link (a link planted where the file should
/// be would otherwise send another file's first line to the server as a token), must be a
/// regular file that belongs to the user running zonefeed (or to root), must not be readable or
/// writable by group or others, and is read only up to `maxBytes`. Anything else is refused with
/// a sentence that says what to do; the sentence never quotes the file's contents.
enum SecretFile {
    struct Refusal: Error, Sendable, CustomStringConvertible {
        var path: String
        var what: String
        var problem: String
        var description: String { "the \(what) \(path) was not read: \(problem)" }
    }

    /// The file's text; nil when there is no file at `path`.
    static func read(_ path: String, what: String, maxBytes: Int) throws(Refusal) -> String? {
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
