/// A member of an entry of a change page's `records`, as `RecordEntry(reading:)` takes it.
enum RecordMember: Equatable, CaseIterable {
    case recordName, recordType, recordChangeTag, fields, pluginFields, created, modified, zoneID, deleted
    case serverErrorCode, reason, retryAfter, uuid
    /// Any other key: passed over.
    case other

    /// The member a key names: the first whose key it is (read as it was written, escapes
    /// undone); `other` for none.
    init(_ key: JSONReader.KeyName) {
        self = Self.allCases.first { $0.key.map(key.isBetweenQuotes) ?? false } ?? .other
    }

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

    /// The member's name, for messages.
    var name: String {
        guard let key else { return "a member" }
        // The key without its quotes and colon.
        return String(key.description.dropFirst().dropLast(2))
    }
}
