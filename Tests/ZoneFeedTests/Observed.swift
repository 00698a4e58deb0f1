import Foundation

/// A value behind a lock that a test can wait on: `wait(until:)` returns as soon as the value
/// meets a condition, checked again at every `update`. The hand-off that lets a test wait for
/// what the code under test did without sleeping real time.
final class Observed<Value: Sendable>: @unchecked Sendable {
    private struct Waiter {
        var condition: @Sendable (Value) -> Bool
        var continuation: CheckedContinuation<Void, Never>
    }

    // @unchecked: the stored properties below are only touched with `lock` held.
    private let lock = NSLock()
    private var value: Value
    private var waiters: [Int: Waiter] = [:]
    private var lastWaiter = 0
    /// Waits cancelled before they were registered.
    private var cancelled: Set<Int> = []

    init(_ value: Value) { self.value = value }

    var current: Value { lock.withLock { value } }

    /// Changes the value, then lets go the waiters whose condition it now meets.
    @discardableResult
    func update<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        let (result, ready) = try lock.withLock { () throws -> (Result, [CheckedContinuation<Void, Never>]) in
            let result = try body(&value)
            let met = waiters.filter { $0.value.condition(value) }
            for id in met.keys { waiters[id] = nil }
            return (result, met.values.map(\.continuation))
        }
        for continuation in ready { continuation.resume() }
        return result
    }

    /// True once the value meets `condition` (at once if it does already); false when it has not
    /// after `timeout` of real time. The timeout bounds a test that fails, so that it says what it
    /// waited for instead of running into the suite's time limit; it synchronises nothing.
    func wait(until condition: @escaping @Sendable (Value) -> Bool, timeout: Duration = .seconds(30)) async -> Bool {
        await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                await self.wait(until: condition)
                return !Task.isCancelled
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
    }

    /// Returns once the value meets `condition`, or the task is cancelled.
    private func wait(until condition: @escaping @Sendable (Value) -> Bool) async {
        let id = lock.withLock {
            lastWaiter += 1
            return lastWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let now = lock.withLock {
                    if cancelled.remove(id) != nil || condition(value) { return true }
                    waiters[id] = Waiter(condition: condition, continuation: continuation)
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            let waiter = lock.withLock {
                guard let waiter = waiters.removeValue(forKey: id) else {
                    cancelled.insert(id)
                    return Waiter?.none
                }
                return waiter
            }
            waiter?.continuation.resume()
        }
    }
}
