import CloudKitModel

/// Whether a zone's feed moves on, page by page. A server that keeps saying `moreComing` but
/// never gets anywhere (broken, or hostile) would hold the run for ever: the zone fails once its
/// pages have not advanced for too long, the other zones go on, and the next run tries again.
///
/// A page does not advance when, while more are said to be coming:
/// - it carries the token it was asked from (whatever records it holds): at most
///   `sameToken` such pages in a row;
/// - it holds no records: at most `emptyPages` in a row (CloudKit may answer a few empty pages
///   while it works through a zone, each with a new token);
/// - it holds exactly what the page before held (each record with the same change tag, or,
///   in a deletion sweep, the same names listed): at most `repeatedPages` in a row;
/// - it carries a token the feed gave before in this run, other than the one it was asked from
///   (a feed going round, each page unlike the one before): at most `sameToken` such pages.
public struct FeedProgress: Sendable {
    public struct Limits: Sendable, Hashable {
        public var sameToken: Int
        public var emptyPages: Int
        public var repeatedPages: Int
        /// The most pages of the database's change feed one run reads; the next run reads on
        /// from there. A feed that names new zones for ever advances, page by page, and would
        /// otherwise hold the run for ever; 10,000 pages name up to 2,000,000 zones.
        public var databasePages: Int
        /// The most bytes of zone names the database's change feed may name in one run before
        /// the run stops reading it, as at `databasePages`: the names are held until the run's
        /// zones are fetched, and a page of 32 MB can name 15,000 zones of 2 KB each.
        public var databaseNameBytes: Int

        public init(
            sameToken: Int = 3, emptyPages: Int = 100, repeatedPages: Int = 3, databasePages: Int = 10_000, databaseNameBytes: Int = 64 << 20
        ) {
            self.sameToken = sameToken
            self.emptyPages = emptyPages
            self.repeatedPages = repeatedPages
            self.databasePages = databasePages
            self.databaseNameBytes = databaseNameBytes
        }
    }

    let limits: Limits
    private var sameToken = 0
    private var empty = 0
    private var repeated = 0
    private var previous: [RecordEntry] = []
    private var previousListed: [ListedRecords] = []
    private var previousZones: ([ZoneID], [ZoneDeletion]) = ([], [])
    /// The hashes of the tokens the feed was asked from or gave, and how many pages gave one
    /// of them again: eight bytes a page, where the tokens themselves can be kilobytes each.
    private var tokensSeen: Set<UInt64> = []
    private var returned = 0
    private let tokenHash = SeededByteHash()

    public init(limits: Limits) {
        self.limits = limits
    }

    /// Notes a page fetched from `token`; returns why the feed is taken as stuck, if it is.
    public mutating func note(_ page: ZoneChangePage, fetchedFrom token: ChangeToken?) -> String? {
        guard page.moreComing else {
            self = FeedProgress(limits: limits)
            return nil
        }
        sameToken = page.syncToken == token ? sameToken + 1 : 0
        if let token { tokensSeen.insert(hash(token)) }
        if page.syncToken != token, !tokensSeen.insert(hash(page.syncToken)).inserted { returned += 1 }
        empty = page.entries.isEmpty && page.listed.isEmpty ? empty + 1 : 0
        // A sweep's pages list names and hold no records: a server that lists the same names
        // again and again, with a new continuation each time, repeats too.
        let holds = !page.entries.isEmpty || !page.listed.isEmpty
        repeated = holds && page.entries == previous && page.listed == previousListed ? repeated + 1 : 0
        previous = page.entries
        previousListed = page.listed
        let stop = "; stopping instead of looping (the next run tries the zone again)"
        if sameToken > limits.sameToken {
            return "the feed does not advance: the server answered \(sameToken) pages in a row with the token it was asked from, "
                + "saying more was coming\(page.entries.isEmpty ? " (the same token with no records)" : "")\(stop)"
        }
        if empty > limits.emptyPages {
            return "the feed does not advance: the server answered \(empty) pages in a row with no records, saying more was coming\(stop)"
        }
        if returned > limits.sameToken {
            return "the feed does not advance: the server answered \(returned) pages with tokens it had given before in this run, "
                + "saying more was coming (the feed goes round)\(stop)"
        }
        if repeated > limits.repeatedPages {
            let what = page.entries.isEmpty ? "\(page.listed.reduce(0) { $0 + $1.names.count }) names listed" : "\(page.entries.count) records"
            return "the feed does not advance: the server answered \(repeated + 1) pages in a row with the same \(what), "
                + "saying more was coming\(stop)"
        }
        return nil
    }

    private func hash(_ token: ChangeToken) -> UInt64 {
        var value = token.value
        return value.withUTF8 { tokenHash($0) }
    }

    /// Notes a page of the database's change feed, the same way: its zones (changed or deleted)
    /// take the place of a zone page's records. (A page with the token it was asked from ends
    /// the feed at once.)
    public mutating func note(_ page: DatabaseChangePage) -> String? {
        guard page.moreComing else {
            self = FeedProgress(limits: limits)
            return nil
        }
        let zones = (page.modifiedZones, page.deletedZones)
        let isEmpty = zones.0.isEmpty && zones.1.isEmpty
        empty = isEmpty ? empty + 1 : 0
        repeated = !isEmpty && zones == previousZones ? repeated + 1 : 0
        previousZones = zones
        let stop = "; stopping instead of looping (the zones it named are exported, and the next run reads the feed again)"
        if empty > limits.emptyPages {
            return "the database change feed does not advance: the server answered \(empty) pages in a row with no zones, saying more was "
                + "coming\(stop)"
        }
        if repeated > limits.repeatedPages {
            return "the database change feed does not advance: the server answered \(repeated + 1) pages in a row with the same "
                + "\(zones.0.count + zones.1.count) zones, saying more was coming\(stop)"
        }
        return nil
    }
}
