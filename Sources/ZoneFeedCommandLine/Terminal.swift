import Foundation
import Synchronization

/// stderr, shared by the logs and the progress line so that a log line never lands in the middle
/// of the progress line.
final class Terminal: Sendable {
    static let shared = Terminal()
    /// Whether the progress line is on the screen; held while writing, so that lines never mix.
    private let progressShown = Mutex(false)
    let isTTY = isatty(STDERR_FILENO) == 1

    func writeLine(_ line: String) {
        progressShown.withLock { progressShown in
            if progressShown {
                write("\r\u{1B}[K")
                progressShown = false
            }
            write(line + "\n")
        }
    }

    func showProgress(_ line: String) {
        progressShown.withLock { progressShown in
            write("\r\u{1B}[K" + line)
            progressShown = true
        }
    }

    func endProgress() {
        progressShown.withLock { progressShown in
            if progressShown { write("\n") }
            progressShown = false
        }
    }

    private func write(_ s: String) {
        FileHandle.standardError.write(Data(s.utf8))
    }
}
