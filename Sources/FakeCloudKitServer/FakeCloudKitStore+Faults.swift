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

    /// A door that keeps the next `count` requests ending in `pathSuffix` until the last of
    /// them arrives, then lets them all through at once (`faults/gate`): clients started one
    /// after another made to begin together, whatever each took to start.
    struct Gate: Sendable {
        var id: Int
        var count: Int
        var arrived = 0
        var pathSuffix: String?
        /// How long a request waits at most, in case the others never come.
        var timeout: Duration

        /// A request kept at a gate: which, and how long it may wait.
        struct Arrival: Sendable {
            var id: Int
            var timeout: Duration
        }
    }

    /// Counts a request at the first gate that still waits for requests of its path (by
    /// `arrive`, in the hop every request makes): nil, and nothing more to do, when none keeps it.
    func arriveAtGate(path: String) -> Gate.Arrival? {
        guard !gates.isEmpty,
            let index = gates.firstIndex(where: { $0.arrived < $0.count && ($0.pathSuffix.map { path.hasSuffix($0) } ?? true) })
        else { return nil }
        gates[index].arrived += 1
        return Gate.Arrival(id: gates[index].id, timeout: gates[index].timeout)
    }

    /// Whether the gate lets its requests through: all it waited for have come, or it was
    /// cleared (`faults/clear`).
    func gateIsOpen(_ id: Int) -> Bool {
        guard let gate = gates.first(where: { $0.id == id }) else { return true }
        return gate.arrived >= gate.count
    }

    /// Keeps a request at its gate until the gate opens or its time is up.
    nonisolated func wait(at gate: Gate.Arrival) async {
        let deadline = ContinuousClock.now + gate.timeout
        // Looked at every few milliseconds rather than woken: a test's door, not a hot path.
        while await !gateIsOpen(gate.id), ContinuousClock.now < deadline {
            do { try await Task.sleep(for: .milliseconds(5)) } catch { return }
        }
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
