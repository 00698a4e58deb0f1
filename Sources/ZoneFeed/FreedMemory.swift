import Dispatch
import Foundation
import Synchronization

/// Hands memory the process has freed back to the system.
///
/// glibc keeps freed memory in its heaps, one heap per thread that allocated (up to eight per
/// core), and a batch's records are made on one thread and freed on another; so a long backfill's
/// resident memory would creep up batch after batch although what is alive stays the same.
/// Releasing what is free after each batch keeps it flat, whatever the size of the backfill.
public enum FreedMemory {
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

    /// `release()` on a queue of its own, so that the caller does not wait; a call made while one
    /// is under way does nothing, as that one releases the same memory.
    public static func releaseInBackground() {
        let busy = releasing.withLock { releasing in
            defer { releasing = true }
            return releasing
        }
        guard !busy else { return }
        queue.async {
            release()
            releasing.withLock { $0 = false }
        }
    }

    private static let queue = DispatchQueue(label: "zonefeed.freed-memory", qos: .utility)
    private static let releasing = Mutex(false)

    #if os(Linux)
        private typealias MallocTrim = @convention(c) (Int) -> Int32
        private static let mallocTrim: MallocTrim? = dlsym(nil, "malloc_trim").map { unsafeBitCast($0, to: MallocTrim.self) }
    #endif
}
