/// A member of an entry of a change page's `records`, as `RecordEntry(reading:)` takes it.
enum RecordMember: Equatable, CaseIterable {
    case recordName, recordType, recordChangeTag, fields, pluginFields, created, modified, zoneID, deleted
    case serverErrorCode, reason, retryAfter, uuid
    /// Any other key: passed over.
    case other

    /// The member a key names: the one whose key it is (read as it was written, escapes undone);
    /// `other` for none. Only the keys of its length are compared: one or two.
    init(_ key: JSONReader.KeyName) {
        let count = key.byteCount
        guard count < Self.byLength.count else {
            self = .other
            return
        }
        self = Self.byLength[count].first { key.isBetweenQuotes($0.key) }?.member ?? .other
    }

    /// Every member but `other` with its key, by the length of its name.
    private static let byLength: [[(member: RecordMember, key: StaticString)]] = {
        let named = allCases.compactMap { member in member.key.map { (member: member, key: $0) } }
        var table = Array(repeating: [(member: RecordMember, key: StaticString)](), count: (named.map { $0.key.utf8CodeUnitCount - 3 }.max() ?? 0) + 1)
        for entry in named { table[entry.key.utf8CodeUnitCount - 3].append(entry) }
        return table
    }()

    /// The member's key as a server writes it, quotes and colon, without spaces; nil for `other`.
    @inline(__always) var key: StaticString? {
        switch self {
        case .recordName: #""recordName":"#
        case .recordType: #""recordType":"#
        case .recordChangeTag: #""recordChangeTag":"#
        case .fields: #""fields":"#
        case .pluginFields: #""pluginFields":"#
        case .created: #""created":"#
        case .modified: #""modified":"#
        case .zoneID: #""zoneID":"#
        case .deleted: #""deleted":"#
        case .serverErrorCode: #""serverErrorCode":"#
        case .reason: #""reason":"#
        case .retryAfter: #""retryAfter":"#
        case .uuid: #""uuid":"#
        case .other: nil
        }
    }

    /// Whether only a live record has the member: a deletion or an error entry is not read for
    /// it (`RecordEntry.init(from:)`), whatever it holds.
    var belongsToALiveRecordAlone: Bool {
        switch self {
        case .recordType, .recordChangeTag, .fields, .created, .modified, .zoneID: true
        default: false
        }
    }

    /// The member's name, for messages.
    var name: String {
        guard let key else { return "a member" }
        // The key without its quotes and colon.
        return String(key.description.dropFirst().dropLast(2))
    }
}
