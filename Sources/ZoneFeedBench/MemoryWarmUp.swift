import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Memory touched and handed back just before each timed phase, so that every phase starts the
/// same way: with free memory the machine has backed.
///
/// The development machine is a virtual machine whose kernel reports free memory to its host
/// (Linux's free page reporting), which takes it back; a page touched again after that costs a
/// fault in the host. Measured there: the first gigabyte touched after a bench took 7.0 s (26.5 µs
/// a page), the same gigabyte touched again at once 0.45 s (1.7 µs a page). A phase writes about
/// 2 KB a row into the page cache (the table, its indexes, the WAL), so it paid that or not as
/// what ran before it had left: the in-process run came after the ceiling had freed gigabytes
/// and cost the server 12 µs a row, the run over HTTP after the fake server had taken 1.7 GB for
/// its pages and cost it 19 µs, the same rows (docs/performance.md). The kernel hands out the
/// pages freed last first, so touching as much as a phase will write and freeing it just before
/// its clock starts puts backed pages first in line for every phase alike, at least for its
/// first seconds (the kernel reports memory that stays free a few seconds, and a phase's later
/// pages may have gone back by the time it reaches them). On a machine that keeps its free
/// memory, this is a moment's work.
enum MemoryWarmUp {
    /// What a phase of `rows` rows writes into the page cache, about: 2 KB a row (1 KB of table
    /// row, its indexes' entries and as much WAL), up to 4 GB (2,000,000 rows' worth).
    static func bytes(forRows rows: Int) -> Int {
        min(rows, 2_000_000) * 2048
    }

    /// Maps `wanted` bytes of anonymous memory, or what `bytesToWarm` allows, writes a byte to
    /// each of its pages, and unmaps it.
    static func touchAndFree(bytes wanted: Int) {
        guard wanted > 0 else { return }
        let bytes = bytesToWarm(wanted: wanted, available: availableBytes())
        guard bytes > 0 else { return }
        // > mmap(2): "MAP_ANONYMOUS The mapping is not backed by any file; its contents are
        // > initialized to zero." Each page is given memory when it is first written.
        guard let memory = mmap(nil, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), memory != MAP_FAILED else { return }
        let page = max(sysconf(Int32(_SC_PAGESIZE)), 4096)
        for offset in stride(from: 0, to: bytes, by: page) { memory.storeBytes(of: 1, toByteOffset: offset, as: UInt8.self) }
        munmap(memory, bytes)
    }

    /// At most half the memory the kernel says is available, so that a machine short of memory
    /// is never pushed into reclaim (or its OOM killer) for a warm-up; nothing where that is not
    /// known.
    static func bytesToWarm(wanted: Int, available: Int?) -> Int {
        max(0, min(wanted, (available ?? 0) / 2))
    }

    /// `MemAvailable` of /proc/meminfo: what can be allocated without swapping; nil where there
    /// is no such file, and then nothing is warmed.
    static func availableBytes() -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/meminfo", encoding: .utf8) else { return nil }
        return availableBytes(meminfo: text)
    }

    /// The `MemAvailable:` line of a /proc/meminfo text, in bytes (it is in kB).
    static func availableBytes(meminfo: String) -> Int? {
        for line in meminfo.split(separator: "\n") where line.hasPrefix("MemAvailable:") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count >= 2, let kilobytes = Int(fields[1]), kilobytes >= 0, kilobytes <= Int.max / 1024 else { return nil }
            return kilobytes * 1024
        }
        return nil
    }
}
