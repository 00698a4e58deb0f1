#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The CPU time the calling thread spends in `body`, in user and system mode: for a bound that
/// tells a fast reader from a hang or a quadratic one. Wall time would count the seconds the
/// thread waited for a core, and in the first seconds of the full suite, every test starting at
/// once on two cores, a reader that needs 0.3 s was seen to take 7. `body` must not suspend: the
/// time is the calling thread's.
public func threadCPUTime(of body: () throws -> Void) rethrows -> Duration {
    let started = threadCPUNow()
    try body()
    return threadCPUNow() - started
}

private func threadCPUNow() -> Duration {
    var now = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
    return .seconds(now.tv_sec) + .nanoseconds(now.tv_nsec)
}
