import Dispatch
import Foundation

/// Turns SIGINT and SIGTERM into a cancellation of the run, so that the current transaction
/// commits or rolls back and the run is recorded as interrupted before the process exits.
final class SignalWatcher: @unchecked Sendable {
    private var sources: [DispatchSourceSignal] = []
    private let lock = NSLock()
    private var received: Int32?

    init(onSignal: @escaping @Sendable (Int32) -> Void) {
        for sig in [SIGINT, SIGTERM] {
            Foundation.signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler { [weak self] in
                guard let self else { return }
                let first = self.lock.withLock { () -> Bool in
                    defer { if self.received == nil { self.received = sig } }
                    return self.received == nil
                }
                if first {
                    onSignal(sig)
                } else {
                    // A second Ctrl-C means "now": the open transaction is rolled back by the server.
                    Foundation.exit(128 + sig)
                }
            }
            source.resume()
            sources.append(source)
        }
    }

    var signal: Int32? { lock.withLock { received } }

    /// 130 for SIGINT, 143 for SIGTERM.
    var exitCode: Int32? { signal.map { 128 + $0 } }
}
