/// A member of an entry of a change page's `records`, as `RecordEntry(reading:)` takes it.
enum RecordMember: Equatable {
    case recordName, recordType, recordChangeTag, fields, pluginFields, created, modified, zoneID, deleted
    case serverErrorCode, reason, retryAfter, uuid
    /// Any other key: passed over.
    case other

    init(_ key: JSONReader.KeyName) {
        self =
            if key.is("recordName") {
                .recordName
            } else if key.is("recordType") {
                .recordType
            } else if key.is("recordChangeTag") {
                .recordChangeTag
            } else if key.is("fields") {
                .fields
            } else if key.is("pluginFields") {
                .pluginFields
            } else if key.is("created") {
                .created
            } else if key.is("modified") {
                .modified
            } else if key.is("zoneID") {
                .zoneID
            } else if key.is("deleted") {
                .deleted
            } else if key.is("serverErrorCode") {
                .serverErrorCode
            } else if key.is("reason") {
                .reason
            } else if key.is("retryAfter") {
                .retryAfter
            } else if key.is("uuid") {
                .uuid
            } else {
                .other
            }
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
        switch self {
        case .recordName: "recordName"
        case .recordType: "recordType"
        case .recordChangeTag: "recordChangeTag"
        case .fields: "fields"
        case .pluginFields: "pluginFields"
        case .created: "created"
        case .modified: "modified"
        case .zoneID: "zoneID"
        case .deleted: "deleted"
        case .serverErrorCode: "serverErrorCode"
        case .reason: "reason"
        case .retryAfter: "retryAfter"
        case .uuid: "uuid"
        case .other: "a member"
        }
    }
}
