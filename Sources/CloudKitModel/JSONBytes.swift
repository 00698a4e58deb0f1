/// A response body kept whole, so that the records read from it can keep their fields as the
/// JSON they came in (`RawFields`) and a destination can read them from there, once, instead of
/// the reader building a dictionary and a `String` per field that are dropped a moment later.
///
/// The bytes are copied in once and never change; the memory lives as long as the last record
/// that points into it.
public final class JSONBytes: @unchecked Sendable {
    // @unchecked: the buffer is written only in `init` and read-only afterwards; the index of
    // kept fields only by the page's reader, each record's before the record exists, never moved.
    public let buffer: UnsafeBufferPointer<UInt8>
    /// The whole allocation `buffer` begins, handed back to `memory` with the page.
    private let storage: UnsafeMutableBufferPointer<UInt8>
    private let memory: PageMemory

    /// The fields of the page's records that are kept as JSON (`RawFields`), one record's after
    /// another, in blocks that are never moved or freed before the page: one index for a page
    /// rather than an array a record, which was an allocation, and a reference that every copy
    /// of the record retained and released (`Benchmarks/`, docs/performance.md). The check of a
    /// record's fields writes each one here as it finds it (`keep`), and the record takes the
    /// run it wrote (`endKeeping`); fields a writer noted are copied in a record at a time.
    @exclusivity(unchecked) private var keptBlocks: [UnsafeMutableBufferPointer<UInt8>] = []
    /// The last block, where fields are written, and how much of it is taken; where the fields
    /// of the record being read begin in it.
    @exclusivity(unchecked) private var block: UnsafeMutablePointer<RawField>?
    @exclusivity(unchecked) private var blockCapacity = 0
    @exclusivity(unchecked) private var blockCount = 0
    @exclusivity(unchecked) private var recordStart = 0
    /// A block's bytes, the fields of about eighty records of twenty fields: the least that
    /// `memory` keeps for later pages. Blocks from the allocator went back to the system when
    /// `FreedMemory` trimmed the heaps, and were faulted in again for a later page (a third of
    /// an in-process run's page faults, `perf record -e page-faults`).
    static let keptBlockBytes = PageMemory.smallest

    public init(copying bytes: UnsafeRawBufferPointer, memory: PageMemory = .shared) {
        let storage = memory.take(atLeast: bytes.count)
        if let base = bytes.baseAddress, bytes.count > 0 {
            storage.baseAddress!.initialize(from: base.assumingMemoryBound(to: UInt8.self), count: bytes.count)
        }
        self.storage = storage
        self.memory = memory
        buffer = UnsafeBufferPointer(start: storage.baseAddress, count: bytes.count)
    }

    public static func copying(_ bytes: [UInt8]) -> JSONBytes {
        bytes.withUnsafeBytes { JSONBytes(copying: $0) }
    }

    /// Takes over `storage`, of which the first `count` bytes are the body.
    private init(adopting storage: UnsafeMutableBufferPointer<UInt8>, count: Int, from memory: PageMemory) {
        self.storage = storage
        self.memory = memory
        buffer = UnsafeBufferPointer(start: storage.baseAddress, count: count)
    }

    deinit {
        memory.giveBack(storage)
        for block in keptBlocks {
            // Bytes again, as the pool hands out its buffers (a field holds no reference).
            _ = UnsafeMutableRawPointer(block.baseAddress!).bindMemory(to: UInt8.self, capacity: block.count)
            memory.giveBack(block)
        }
    }

    // The page's index, for its reader alone, which writes a record's fields before it makes
    // the record: `beginKeeping`, a `keep` for each field, then `endKeeping` (or
    // `abandonKeeping` for fields that are not kept).

    func beginKeeping() { recordStart = blockCount }

    @inline(__always) func keep(_ field: RawField) {
        if blockCount == blockCapacity { moveToNewBlock() }
        (block! + blockCount).initialize(to: field)
        blockCount += 1
    }

    /// The fields kept since `beginKeeping`, valid as long as the page.
    func endKeeping() -> UnsafeBufferPointer<RawField> {
        UnsafeBufferPointer(start: block.map { $0 + recordStart }, count: blockCount - recordStart)
    }

    func abandonKeeping() { blockCount = recordStart }

    /// Keeps a record's fields found otherwise than by the check (`RecordFields.read(from:written:fields:)`).
    func keep(_ fields: UnsafeBufferPointer<RawField>) -> UnsafeBufferPointer<RawField> {
        beginKeeping()
        for field in fields { keep(field) }
        return endKeeping()
    }

    /// A one-object page's fields, kept in memory of their own size rather than a block of
    /// `keptBlockBytes` (the fake source keeps a thousand such pages a zone, `RawFields.object`).
    func keepAlone(_ fields: UnsafeBufferPointer<RawField>) -> UnsafeBufferPointer<RawField> {
        precondition(keptBlocks.isEmpty && block == nil, "a page's fields kept alone after others")
        let bytes = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: max(1, fields.count * MemoryLayout<RawField>.stride))
        let kept = UnsafeMutableRawPointer(bytes.baseAddress!).bindMemory(to: RawField.self, capacity: fields.count)
        if let base = fields.baseAddress { kept.initialize(from: base, count: fields.count) }
        keptBlocks.append(bytes)
        return UnsafeBufferPointer(start: kept, count: fields.count)
    }

    /// A new block, with the fields of the record being read moved to its start.
    @inline(never) private func moveToNewBlock() {
        let sofar = blockCount - recordStart
        let bytes = memory.take(atLeast: max(Self.keptBlockBytes, 2 * sofar * MemoryLayout<RawField>.stride))
        let room = bytes.count / MemoryLayout<RawField>.stride
        let new = UnsafeMutableRawPointer(bytes.baseAddress!).bindMemory(to: RawField.self, capacity: room)
        if let block, sofar > 0 { new.initialize(from: block + recordStart, count: sofar) }
        keptBlocks.append(bytes)
        block = new
        blockCapacity = room
        blockCount = sofar
        recordStart = 0
    }

    /// A body gathered part by part, as it arrives, into the allocation that then becomes its
    /// `JSONBytes`: one copy of each byte rather than two (a page is a few hundred kilobytes,
    /// and copying it again from a `Data` took 1% of a run over HTTP, and as much again in
    /// page faults, in a perf profile). Not for concurrent use: one owner at a time (the HTTP
    /// client's body under its lock, the fake source's page while it writes it).
    public final class Gatherer: @unchecked Sendable {
        // @unchecked: mutated by one owner at a time, never concurrently. For the same reason
        // exempt from the run-time check of exclusive access, which cost more than a small
        // append itself (the fake source appends a record's fields a few hundred pieces at a
        // time: 7% of an in-process run went to the checks, perf).
        @exclusivity(unchecked) private var storage: UnsafeMutableBufferPointer<UInt8>?
        @exclusivity(unchecked) public private(set) var count = 0

        /// Where the body's memory comes from and goes back to.
        let memory: PageMemory

        public init(memory: PageMemory = .shared) {
            self.memory = memory
        }

        /// Makes room for `capacity` bytes in all, so that a body of an announced length is
        /// gathered without growing.
        public func reserveCapacity(_ capacity: Int) {
            guard capacity > (storage?.count ?? 0) else { return }
            let grown = memory.take(atLeast: capacity)
            if let storage {
                if count > 0 { grown.baseAddress!.initialize(from: storage.baseAddress!, count: count) }
                memory.giveBack(storage)
            }
            storage = grown
        }

        public func append(_ part: UnsafeRawBufferPointer) {
            guard let source = part.baseAddress, part.count > 0 else { return }
            room(atLeast: part.count).baseAddress!.copyMemory(from: source, byteCount: part.count)
            count += part.count
        }

        /// Room for at least `count` more bytes after those gathered, for a writer of many small
        /// pieces (the fake source writes a record's fields a few hundred at a time): it writes
        /// into the room itself and says how much it wrote (`commit`), where a call of `append`
        /// for each piece, in another module, cost a call and a copy of unknown length per piece
        /// (7.6% of an in-process run, perf). Its contents are undefined until written.
        public func room(atLeast count: Int) -> UnsafeMutableRawBufferPointer {
            precondition(count >= 0, "a room of \(count) bytes")
            if storage == nil || self.count + count > storage!.count {
                reserveCapacity(max(self.count + count, 2 * (storage?.count ?? 0), 16 * 1024))
            }
            let storage = storage!
            return UnsafeMutableRawBufferPointer(start: storage.baseAddress! + self.count, count: storage.count - self.count)
        }

        /// Takes the first `count` bytes of the room `room` gave as gathered.
        public func commit(_ count: Int) {
            precondition(count >= 0 && self.count + count <= (storage?.count ?? 0), "more committed than the room held")
            self.count += count
        }

        /// The bytes gathered, handed over; the gatherer is empty again.
        public func finish() -> JSONBytes {
            defer {
                storage = nil
                count = 0
            }
            guard let storage else { return JSONBytes(copying: UnsafeRawBufferPointer(start: nil, count: 0), memory: memory) }
            return JSONBytes(adopting: storage, count: count, from: memory)
        }

        deinit { storage.map(memory.giveBack) }
    }

    /// A reader over the bytes that makes the records it reads point into them.
    public func reader() -> JSONReader { JSONReader(buffer, owner: self) }
}
