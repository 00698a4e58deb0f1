import Dispatch
import Foundation
import Synchronization

/// Hands memory the process has freed back to the system.
///
/// glibc keeps freed memory in its heaps, one heap per thread that allocated (up to eight per
/// core), and a batch's records are made on one thread and freed on another; so a long backfill's
/// resident memory would creep up batch after batch although what is alive stays the same.
/// Releasing what is free when resident memory has grown keeps it flat, whatever the size of the
/// backfill. Pages' bytes, the largest allocations, are not freed to glibc but kept for the next
/// pages (`PageMemory`, bounded), so that they are not released here and faulted in again.
public enum FreedMemory {
    /// How far resident memory may grow past where the last release left it before free memory
    /// is released again. Releasing after every batch kept resident memory lowest, but memory
    /// handed back is handed out again as fresh pages, each a page fault and a page cleared:
    /// about a seventh of a run's system CPU over loopback HTTP (perf, docs/performance.md).
    public static let growthAllowed = 8 << 20

    /// Releases what is free now.
    public static func release() {
        #if os(Linux)
            // > malloc_trim(3): "attempts to release free memory from the heap (by calling
            // > sbrk(2) or madvise(2) with suitable arguments)". A glibc extension, which Swift's
            // > Glibc module does not declare, hence the lookup.
            guard let trim = mallocTrim else { return }
            _ = trim(0)
        #endif
    }

    /// On a queue of its own, so that the caller does not wait: releases what is free when
    /// resident memory has grown more than `growthAllowed` since the last release (or since the
    /// first call). A call made while one is under way does nothing, as that one looks at the
    /// same memory.
    public static func releaseInBackground() {
        let busy = releasing.withLock { releasing in
            defer { releasing = true }
            return releasing
        }
        guard !busy else { return }
        queue.async {
            releaseIfGrown()
            releasing.withLock { $0 = false }
        }
    }

    /// Where the last release left resident memory; nil until the first look.
    private static let floor = Mutex<Int?>(nil)

    private static func releaseIfGrown() {
        guard let resident = residentBytes() else {
            release()
            return
        }
        guard let last = floor.withLock({ $0 }) else {
            floor.withLock { $0 = resident }
            return
        }
        guard resident > last + growthAllowed else { return }
        release()
        let after = residentBytes() ?? resident
        floor.withLock { $0 = after }
    }

    /// The process's resident memory, from /proc/self/statm (its second number, in pages); nil
    /// where there is none.
    static func residentBytes() -> Int? {
        #if os(Linux)
            let fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { return nil }
            defer { close(fd) }
            var buffer = [UInt8](repeating: 0, count: 128)
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard count > 0 else { return nil }
            let fields = buffer[..<count].split(separator: UInt8(ascii: " "))
            guard fields.count > 1, let pages = Int(String(decoding: fields[1], as: UTF8.self)) else { return nil }
            return pages * sysconf(Int32(_SC_PAGESIZE))
        #else
            return nil
        #endif
    }

    private static let queue = DispatchQueue(label: "zonefeed.freed-memory", qos: .utility)
    private static let releasing = Mutex(false)

    #if os(Linux)
        private typealias MallocTrim = @convention(c) (Int) -> Int32
        private static let mallocTrim: MallocTrim? = dlsym(nil, "malloc_trim").map { unsafeBitCast($0, to: MallocTrim.self) }
    #endif
}
