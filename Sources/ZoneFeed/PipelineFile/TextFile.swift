import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

public struct ReadFailure: Error, Sendable {
    /// `strerror`'s sentence, or what else kept the file from being read.
    public var reason: String
    /// The file is larger than the most that is read: the reason says so, the caller says why.
    public var tooLarge = false
}

/// Reads with POSIX calls rather than Foundation so that the reason a read failed is `strerror`'s
/// plain sentence ("No such file or directory"), the one users know from every other tool.
///
/// At most `maxBytes` are read: reading stops at `maxBytes + 1` whatever the path names (a FIFO,
/// `/dev/zero`, a file of gigabytes), so a wrong path costs a small buffer, not the machine's
/// memory. The size is not asked of `stat` first: a FIFO or a device has none worth trusting.
///
/// A FIFO that nothing writes to within `fifoWait` is refused: opened without O_NONBLOCK, it
/// held the command (a cron job's, say) in `open` for ever.
func readTextFile(atPath path: String, maxBytes: Int, fifoWait: Duration = .seconds(10)) -> Result<String, ReadFailure> {
    let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
    guard fd >= 0 else { return .failure(ReadFailure(reason: String(cString: strerror(errno)))) }
    defer { close(fd) }
    var info = stat()
    if fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFIFO {
        var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        var polled: Int32
        let milliseconds = Int32(clamping: min(fifoWait.components.seconds, 3_600) * 1000)
        repeat { polled = poll(&ready, 1, milliseconds) } while polled < 0 && errno == EINTR
        if polled <= 0 {
            let reason = "it is a FIFO that nothing wrote to within \(fifoWait.components.seconds) s: "
            return .failure(ReadFailure(reason: reason + "name the file itself, or write to the FIFO as zonefeed starts"))
        }
    }
    // Reads wait for a writer's next bytes, as they would have.
    _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 64 * 1024)
    while bytes.count <= maxBytes {
        let wanted = min(buffer.count, maxBytes + 1 - bytes.count)
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, wanted) }
        if count < 0 {
            if errno == EINTR { continue }
            return .failure(ReadFailure(reason: String(cString: strerror(errno))))
        }
        if count == 0 { break }
        bytes.append(contentsOf: buffer[0..<count])
    }
    guard bytes.count <= maxBytes else {
        return .failure(ReadFailure(reason: "it is larger than \(byteSize(maxBytes))", tooLarge: true))
    }
    guard let text = String(bytes: bytes, encoding: .utf8) else {
        return .failure(ReadFailure(reason: "the file is not UTF-8 text"))
    }
    return .success(text)
}

/// A text file read up to a cap, for the modules that read a file a flag names (the metrics
/// file's previous contents): the same reader as the pipeline file's.
public enum TextFile {
    /// The file's text; nil when it cannot be read, is larger than `maxBytes` or is not UTF-8.
    public static func read(atPath path: String, maxBytes: Int) -> String? {
        try? readTextFile(atPath: path, maxBytes: maxBytes).get()
    }

    /// The file's text, or why it could not be read: for files a pipeline names, which a FIFO
    /// must not hold up for ever nor a huge file fill memory with.
    public static func readOrSayWhy(atPath path: String, maxBytes: Int) -> Result<String, ReadFailure> {
        readTextFile(atPath: path, maxBytes: maxBytes)
    }
}

/// `1 MiB`, `16 MiB`, `512 KiB`, `100 bytes`.
func byteSize(_ bytes: Int) -> String {
    if bytes >= 1 << 20, bytes % (1 << 20) == 0 { return "\(bytes >> 20) MiB" }
    if bytes >= 1 << 10, bytes % (1 << 10) == 0 { return "\(bytes >> 10) KiB" }
    return "\(bytes.grouped) bytes"
}
