import CloudKitModel
import Foundation

/// The JSON bodies the server sends, written straight into bytes with `JSONWriter` (a page of 200
/// records is written on every fetch of a backfill, so this avoids `JSONEncoder`'s overhead). A
/// record's keys and fields come in a fixed order; the members of asset and location values, on
/// pages, in their dictionaries' order (`sortsKeys` off), as sorting them cost more than the rest.
extension JSONWriter {
    mutating func literal(_ text: StaticString) {
        raw(text)
    }

    mutating func key(_ name: StaticString) {
        bytes.append(UInt8(ascii: "\""))
        literal(name)
        literal("\":")
    }

    mutating func write(zoneID: ZoneID) {
        literal("{\"zoneName\":")
        writeString(zoneID.zoneName)
        literal(",\"ownerRecordName\":")
        writeString(zoneID.ownerRecordName)
        literal(",\"zoneType\":")
        writeString(zoneID.zoneType ?? "REGULAR_CUSTOM_ZONE")
        literal("}")
    }

    mutating func write(stamp: RecordStamp) {
        literal("{\"timestamp\":")
        writeInteger(stamp.timestamp)
        if let user = stamp.userRecordName {
            literal(",\"userRecordName\":")
            writeString(user)
        }
        if let device = stamp.deviceID {
            literal(",\"deviceID\":")
            writeString(device)
        }
        literal("}")
    }

    /// A live record as `records/changes` returns it; `desiredKeys` (when set) filters the fields.
    mutating func write(record: Record, zoneID: ZoneID, desiredKeys: Set<String>?) {
        literal("{\"recordName\":")
        writeString(record.recordName)
        literal(",\"recordType\":")
        writeString(record.recordType)
        if let tag = record.recordChangeTag {
            literal(",\"recordChangeTag\":")
            writeString(tag)
        }
        literal(",\"fields\":{")
        // The fields in key order. Sorting the keys with their places in the dictionary, rather
        // than the keys alone, saves looking each one up again (hashing it) to write its value.
        let fields = record.fields
        var order = fields.indices.map { (key: fields.keys[$0], index: $0) }
        order.sort { $0.key < $1.key }
        if let desiredKeys { order.removeAll { !desiredKeys.contains($0.key) } }
        for (i, field) in order.enumerated() {
            if i > 0 { literal(",") }
            writeString(field.key)
            literal(":")
            write(field: fields.values[field.index])
        }
        literal("}")
        literal(",\"pluginFields\":{}")
        if let created = record.created {
            literal(",\"created\":")
            write(stamp: created)
        }
        if let modified = record.modified {
            literal(",\"modified\":")
            write(stamp: modified)
        }
        literal(",\"deleted\":false,\"zoneID\":")
        write(zoneID: zoneID)
        literal("}")
    }

    /// One entry of `records[]`: a record, a tombstone (`recordName`, `deleted`, `zoneID`, and no
    /// `recordType`, as observed) or a per-record error. (Public for the micro-benchmark,
    /// `Benchmarks/`, whose pages are written as the server writes its pages.)
    public mutating func write(entry: RecordEntry, zoneID: ZoneID, desiredKeys: Set<String>?) {
        switch entry {
        case .record(let record):
            write(record: record, zoneID: zoneID, desiredKeys: desiredKeys)
        case .deleted(let name):
            literal("{\"recordName\":")
            writeString(name)
            literal(",\"deleted\":true,\"zoneID\":")
            write(zoneID: zoneID)
            literal("}")
        case .unreadable(let entry):
            // Never in the fake's history (only a client reads one); written as it was read.
            var writer = JSONWriter()
            writer.write(entry.json)
            bytes.append(contentsOf: writer.bytes)
        case .error(let error):
            literal("{")
            if let name = error.recordName {
                literal("\"recordName\":")
                writeString(name)
                literal(",")
            }
            literal("\"serverErrorCode\":")
            writeString(error.serverErrorCode)
            literal(",\"reason\":")
            writeString(error.reason ?? error.serverErrorCode)
            if let retryAfter = error.retryAfter {
                literal(",\"retryAfter\":")
                writeDouble(retryAfter)
            }
            literal(",\"uuid\":")
            writeString(error.uuid ?? UUID().uuidString.lowercased())
            literal("}")
        }
    }
}

/// A whole-request error body, `{uuid, serverErrorCode, reason, redirectURL?, retryAfter?}`.
func errorBody(code: String, reason: String, redirectURL: String? = nil, retryAfter: Double? = nil) -> [UInt8] {
    var w = JSONWriter(capacity: 160)
    w.literal("{\"uuid\":")
    w.writeString(UUID().uuidString.lowercased())
    w.literal(",\"serverErrorCode\":")
    w.writeString(code)
    w.literal(",\"reason\":")
    w.writeString(reason)
    if let redirectURL {
        w.literal(",\"redirectURL\":")
        w.writeString(redirectURL)
    }
    if let retryAfter {
        w.literal(",\"retryAfter\":")
        w.writeDouble(retryAfter)
    }
    w.literal("}")
    return w.bytes
}
