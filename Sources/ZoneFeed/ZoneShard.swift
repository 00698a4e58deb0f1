import CloudKitModel

/// One of `count` shares of a pipeline's zones (`zonefeed run --shard INDEX/COUNT`): a zone
/// belongs to the share its owner and name hash to, so that the pods of a Kubernetes Indexed Job
/// split the zones between them without talking to each other. The zone locks stay: two
/// processes given the same index, or a pod's retry beside its first try, still never apply one
/// zone at once.
public struct ZoneShard: Sendable, Hashable, CustomStringConvertible {
    public let index: Int
    public let count: Int

    public static let maxCount = 10_000

    public init?(index: Int, count: Int) {
        guard (1...Self.maxCount).contains(count), (0..<count).contains(index) else { return nil }
        self.index = index
        self.count = count
    }

    /// `INDEX/COUNT`, as `2/4`.
    public init?(_ text: String) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let index = Int(parts[0]), let count = Int(parts[1]) else { return nil }
        self.init(index: index, count: count)
    }

    public var description: String { "\(index)/\(count)" }

    /// Whether the zone is this share's: FNV-1a of `owner/zoneName` in UTF-8, modulo the count,
    /// the same in every process and on every machine (Swift's `Hasher` is seeded per process).
    public func holds(_ zone: ZoneID) -> Bool {
        Int(Self.hash("\(zone.ownerRecordName)/\(zone.zoneName)") % UInt64(count)) == index
    }

    static func hash(_ text: String) -> UInt64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 { h = (h ^ UInt64(byte)) &* 0x100_0000_01b3 }
        return h
    }
}
