import Synchronization

/// The memory pages' bytes are kept in (`JSONBytes`), and the index of their kept fields, handed
/// back when a page is freed and handed out again for a later page, instead of going back to the
/// allocator.
///
/// A page is a few hundred kilobytes. Freed to glibc, its memory goes back to the system when
/// `FreedMemory` trims the heaps (it must, or resident memory creeps up batch after batch), and
/// the next page is written into fresh pages of memory: a page fault and a page cleared for every
/// 4 KiB of every page read. Memory kept here is bounded, and is not trimmed while pages come
/// (`releaseKept` frees it when none are coming for a while).
public final class PageMemory: Sendable {
    /// What every page's bytes use.
    public static let shared = PageMemory(mostKept: 16 << 20)

    /// Buffers smaller than this are allocated and freed as usual: glibc hands them out of its
    /// heaps without a fault, as they are far from the size its trimming gives back.
    public static let smallest = 64 << 10
    /// The most memory kept for later pages (the shared pool's: a batch's pages, about 25 of
    /// 330 KB, and their indexes, two or three blocks of 64 KiB each). A pool of 64 MiB took a
    /// fifth fewer page faults in an in-process run of 400,000 records (22,000 against 27,000),
    /// under one percent of its CPU: not worth the resident memory it can hold.
    public let mostKept: Int

    // @unchecked: a buffer is owned by the pool while it is in it, and by whoever took it
    // afterwards; the pool only hands buffers over.
    private struct Pool: @unchecked Sendable {
        var buffers: [UnsafeMutableBufferPointer<UInt8>] = []
        var bytes = 0
    }
    private let kept = Mutex(Pool())

    public init(mostKept: Int) {
        self.mostKept = mostKept
    }

    deinit {
        releaseKept()
    }

    /// A buffer of at least `count` bytes (their contents undefined): a kept one when one of
    /// the size is kept, else new memory, rounded up to 64 KiB so that it serves pages of about
    /// its size later.
    public func take(atLeast count: Int) -> UnsafeMutableBufferPointer<UInt8> {
        guard count >= Self.smallest else { return .allocate(capacity: max(1, count)) }
        let taken = kept.withLock { kept -> UnsafeMutableBufferPointer<UInt8>? in
            // The smallest that holds `count` and is at most twice it: a large buffer is not
            // spent on a small page, where most of it would be held for nothing.
            var best: Int?
            for (i, buffer) in kept.buffers.enumerated() where buffer.count >= count && buffer.count <= 2 * count {
                if best.map({ buffer.count < kept.buffers[$0].count }) ?? true { best = i }
            }
            guard let best else { return nil }
            let buffer = kept.buffers.remove(at: best)
            kept.bytes -= buffer.count
            return buffer
        }
        if let taken { return taken }
        let rounded = (count + Self.smallest - 1) / Self.smallest * Self.smallest
        return .allocate(capacity: rounded)
    }

    /// Takes back a buffer `take` handed out (or any allocated one), to hand out again, or frees
    /// it when the pool is full or it is small.
    public func giveBack(_ buffer: UnsafeMutableBufferPointer<UInt8>) {
        guard buffer.count >= Self.smallest else {
            buffer.deallocate()
            return
        }
        let isKept = kept.withLock { kept -> Bool in
            guard kept.bytes + buffer.count <= mostKept else { return false }
            kept.buffers.append(buffer)
            kept.bytes += buffer.count
            return true
        }
        if !isKept { buffer.deallocate() }
    }

    /// Frees every buffer kept, for when no page is coming for a while (a `watch` waiting for
    /// its next cycle): kept memory stays resident, which a long wait does not pay back. The
    /// next page after is written into fresh memory, once. Returns how many bytes were freed.
    @discardableResult
    public func releaseKept() -> Int {
        let buffers = kept.withLock { kept in
            defer { kept = Pool() }
            return kept.buffers
        }
        for buffer in buffers { buffer.deallocate() }
        return buffers.reduce(0) { $0 + $1.count }
    }

    /// How many bytes are kept now, for tests.
    public var keptBytes: Int { kept.withLock { $0.bytes } }
}
