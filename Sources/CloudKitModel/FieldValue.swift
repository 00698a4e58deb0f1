/// A CloudKit field value, dispatched on its `type` tag as the reference advises (never on the JSON
/// shape of `value`). Values zonefeed does not interpret stay as JSON, so nothing is lost.
///
/// The cases with large payloads (a reference, 80 bytes; a tag beside JSON, 40) are `indirect`,
/// so that a value takes 24 bytes rather than 88: fields read into the model (those a page's
/// own bytes cannot be kept for) hold a list's elements as values, and a list of 4,000,000
/// zeros (8 MB of JSON) took 360 MB more at its peak before, 120 MB more after.
public enum FieldValue: Sendable, Hashable {
    case string(String)
    case int64(Int64)
    case double(Double)
    /// Milliseconds since 1970-01-01T00:00:00Z.
    case timestamp(Int64)
    /// Base64 text as sent; decoded only when a `bytea` column needs the bytes.
    case bytes(String)
    case encryptedBytes(String)
    indirect case reference(Reference)
    /// `ASSETID` (or `ASSET`): the asset dictionary as sent.
    indirect case asset(tag: String, JSONValue)
    case location(JSONValue)
    /// A `*_LIST` value; `tag` is the whole tag (`STRING_LIST`) and the elements use the scalar cases.
    case list(tag: String, [FieldValue])
    /// A type zonefeed does not know, or a value that does not match its type tag: kept as sent.
    indirect case unknown(tag: String, JSONValue)

    /// The type tag CloudKit uses for this value.
    public var typeTag: String {
        switch self {
        case .string: return "STRING"
        case .int64: return "INT64"
        case .double: return "DOUBLE"
        case .timestamp: return "TIMESTAMP"
        case .bytes: return "BYTES"
        case .encryptedBytes: return "ENCRYPTED_BYTES"
        case .reference: return "REFERENCE"
        case .asset(let tag, _): return tag
        case .location: return "LOCATION"
        case .list(let tag, _): return tag
        case .unknown(let tag, _): return tag
        }
    }

    /// Whether any text inside the value contains a NUL character.
    public var containsNUL: Bool {
        switch self {
        case .string(let s), .bytes(let s), .encryptedBytes(let s): return s.containsNUL
        case .int64, .double, .timestamp: return false
        case .reference(let r):
            // Every part the value is written back with (`JSONWriter`), the action and the zone's
            // type too: a NUL in any of them is refused by jsonb, and the batch with it.
            return r.recordName.containsNUL || (r.action?.containsNUL ?? false) || (r.zoneID?.zoneName.containsNUL ?? false)
                || (r.zoneID?.ownerRecordName.containsNUL ?? false) || (r.zoneID?.zoneType?.containsNUL ?? false)
        // The tag is the server's (`"type"`), written back with the value and, when evolving, as
        // the type of the column it makes.
        case .asset(let tag, let j), .unknown(let tag, let j): return tag.containsNUL || j.containsNUL
        case .location(let j): return j.containsNUL
        case .list(let tag, let items): return tag.containsNUL || items.contains { $0.containsNUL }
        }
    }
}
