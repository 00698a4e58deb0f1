import CloudKitModel

/// A batch's entries until it is applied, page by page as they came: each page's own array is
/// kept, and the batch's one array is made once, by moving each entry out of its page rather
/// than copying it. A copy retains every reference an entry holds (its names, its page's bytes,
/// its fields' index) and the page's array then releases them all again: appending each page to
/// one array cost about 4% of a run over HTTP in copies and their undoing (perf,
/// docs/performance.md).
struct PendingEntries {
    private var pages: [[RecordEntry]] = []
    /// How many entries the pages hold.
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    /// Takes a page's entries, leaving `entries` empty, so that the array taken is shared with
    /// nothing but what looks at the page (`FeedProgress` keeps the last page's to compare with
    /// the next), and its entries can be moved once the next page has come.
    mutating func append(taking entries: inout [RecordEntry]) {
        guard !entries.isEmpty else { return }
        var taken: [RecordEntry] = []
        swap(&taken, &entries)
        count += taken.count
        pages.append(taken)
    }

    /// The names of the live records among the entries, by their bytes.
    func liveRecordNames() -> Set<ExactName> {
        var names = Set<ExactName>()
        for page in pages {
            for entry in page { if let (_, name) = entry.liveRecordTypeAndName { names.insert(ExactName(name)) } }
        }
        return names
    }

    mutating func removeAll() {
        pages.removeAll()
        count = 0
    }

    /// The entries in the order they came, the pages forgotten.
    mutating func take() -> [RecordEntry] {
        defer { removeAll() }
        if pages.count == 1 { return pages[0] }
        let total = count
        return [RecordEntry](unsafeUninitializedCapacity: total) { joined, initialized in
            guard let base = joined.baseAddress else { return }
            for i in pages.indices {
                // Every page's array but the last is this one's alone (`append(taking:)`) and is
                // written in place; the last, which `FeedProgress` still holds, is copied first
                // (Array's copy on write): a page a batch.
                pages[i].withUnsafeMutableBufferPointer { page in
                    guard let from = page.baseAddress else { return }
                    (base + initialized).moveInitialize(from: from, count: page.count)
                    // What was moved out is filled again with an entry that holds nothing to
                    // release (an empty String has no storage), which the page's array destroys.
                    from.initialize(repeating: Self.placeholder, count: page.count)
                    initialized += page.count
                }
            }
        }
    }

    private static let placeholder = RecordEntry.deleted(recordName: "")
}
