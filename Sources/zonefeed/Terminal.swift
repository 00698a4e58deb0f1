import Foundation

/// stderr, shared by the logs and the progress line so that a log line never lands in the middle
/// of the progress line.
final class Terminal: @unchecked Sendable {
    static let shared = Terminal()
    private let lock = NSLock()
    private var progressShown = false
    let isTTY = isatty(STDERR_FILENO) == 1

    func writeLine(_ line: String) {
        lock.withLock {
            if progressShown {
                write("\r\u{1B}[K")
                progressShown = false
            }
            write(line + "\n")
        }
    }

    func showProgress(_ line: String) {
        lock.withLock {
            write("\r\u{1B}[K" + line)
            progressShown = true
        }
    }

    func endProgress() {
        lock.withLock {
            if progressShown { write("\n") }
            progressShown = false
        }
    }

    private func write(_ s: String) {
        FileHandle.standardError.write(Data(s.utf8))
    }
}
