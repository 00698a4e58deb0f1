import Foundation
import Synchronization

/// One line of stdin, read on a thread of its own: a read that blocks (a person who has not
/// pasted yet) must not hold a thread of the cooperative pool, and is given up after `timeout`.
enum StandardInput {
    enum Line: Sendable, Equatable {
        case line(String)
        /// More than `maxBytes` before the end of the line.
        case tooLong
        case endOfInput
        case timedOut
    }

    static func readLine(maxBytes: Int, timeout: Duration) async -> Line {
        await withCheckedContinuation { (continuation: CheckedContinuation<Line, Never>) in
            let once = ResumeOnce(continuation)
            let reader = Thread { once.resume(readLineBlocking(maxBytes: maxBytes)) }
            reader.start()
            let (seconds, attoseconds) = timeout.components
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(seconds) * 1000 + Int(attoseconds / 1_000_000_000_000_000))) {
                once.resume(.timedOut)
            }
        }
    }

    /// Reads byte by byte up to a newline (a CR before it is dropped): a line is at most a few
    /// kilobytes, and nothing past it is taken from stdin.
    private static func readLineBlocking(maxBytes: Int) -> Line {
        var bytes: [UInt8] = []
        var byte: UInt8 = 0
        while true {
            let count = read(STDIN_FILENO, &byte, 1)
            if count < 0, errno == EINTR { continue }
            guard count == 1 else { return bytes.isEmpty ? .endOfInput : .line(String(decoding: bytes, as: UTF8.self)) }
            if byte == UInt8(ascii: "\n") { break }
            guard bytes.count < maxBytes else { return .tooLong }
            bytes.append(byte)
        }
        if bytes.last == UInt8(ascii: "\r") { bytes.removeLast() }
        return .line(String(decoding: bytes, as: UTF8.self))
    }

    /// Resumes a continuation with the first value given; later ones are dropped.
    private final class ResumeOnce: Sendable {
        private let continuation: Mutex<CheckedContinuation<Line, Never>?>

        init(_ continuation: CheckedContinuation<Line, Never>) { self.continuation = Mutex(continuation) }

        func resume(_ line: Line) {
            let pending = continuation.withLock { continuation in
                defer { continuation = nil }
                return continuation
            }
            pending?.resume(returning: line)
        }
    }
}
