import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

struct ReadFailure: Error {
    var reason: String
}

/// Reads with POSIX calls rather than Foundation so that the reason a read failed is `strerror`'s
/// plain sentence ("No such file or directory"), the one users know from every other tool.
func readTextFile(atPath path: String) -> Result<String, ReadFailure> {
    let fd = open(path, O_RDONLY)
    guard fd >= 0 else { return .failure(ReadFailure(reason: String(cString: strerror(errno)))) }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 64 * 1024)
    while true {
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if count < 0 {
            if errno == EINTR { continue }
            return .failure(ReadFailure(reason: String(cString: strerror(errno))))
        }
        if count == 0 { break }
        bytes.append(contentsOf: buffer[0..<count])
    }
    guard let text = String(bytes: bytes, encoding: .utf8) else {
        return .failure(ReadFailure(reason: "the file is not UTF-8 text"))
    }
    return .success(text)
}
