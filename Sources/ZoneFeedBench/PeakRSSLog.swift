import Synchronization

/// The peak RSS of each `zonefeed run` the bench timed, in the order they ended: the issue bounds
/// every phase's, the no-op runs, the scale-out phase's single process and the public database's
/// sweep included, not only those a rate is printed beside.
final class PeakRSSLog: Sendable {
    struct Entry: Sendable {
        var label: String
        var bytes: Int
    }

    private let entries = Mutex<[Entry]>([])

    func note(_ label: String, bytes: Int) {
        entries.withLock { $0.append(Entry(label: label, bytes: bytes)) }
    }

    var all: [Entry] { entries.withLock { $0 } }
}
