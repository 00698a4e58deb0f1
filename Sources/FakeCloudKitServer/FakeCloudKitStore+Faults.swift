import Foundation
import NIOCore

/// The faults the admin endpoints queue (`faults/…`): each taken by the next request it matches.
extension FakeCloudKitStore {
    struct Fault: Sendable {
        enum Action: Sendable {
            case reply(Reply)
            /// Send the real answer with its full Content-Length, then close mid-body (after
            /// `bytes` of it; half when nil).
            case cutShort(bytes: Int?)
            /// Send the real answer's head at once, then its body a byte every `interval`.
            case trickle(interval: Duration)
            /// The real answer, kept (and the request in flight) this long before it leaves.
            case hold(Duration)
            /// The real answer with every `find` in its body replaced by its `replace` (raw bytes:
            /// text that is not UTF-8, escapes of half a surrogate, control characters).
            case rewrite([(find: [UInt8], replace: [UInt8])])
            /// The real answer, its JSON followed by spaces up to `bytes`: as large as asked,
            /// and still the same page.
            case pad(bytes: Int)
        }
        var action: Action
        var remaining: Int
        var pathSuffix: String?
        /// Only requests for this zone (`records/changes` of a zone by that name).
        var zone: String? = nil
    }

    func takeFault(path: String, zone: String?) -> Fault.Action? {
        guard
            let index = faults.firstIndex(where: { fault in
                fault.remaining > 0 && (fault.pathSuffix.map { path.hasSuffix($0) } ?? true) && (fault.zone.map { $0 == zone } ?? true)
            })
        else { return nil }
        faults[index].remaining -= 1
        let action = faults[index].action
        if faults[index].remaining <= 0 { faults.remove(at: index) }
        faultsServed += 1
        return action
    }

    func takeDelay() -> Int {
        guard delayMilliseconds > 0 else { return 0 }
        if let remaining = delayRemaining {
            if remaining <= 1 {
                delayRemaining = nil
                defer { delayMilliseconds = 0 }
                return delayMilliseconds
            }
            delayRemaining = remaining - 1
        }
        return delayMilliseconds
    }
}
