import CloudKitModel

/// A field's CloudKit type, read from its bytes: the ones written straight from JSON, and the
/// rest.
enum FieldTag {
    case string, int64, double, timestamp, bytes, encryptedBytes, reference, asset, location
    case stringList, int64List, doubleList, timestampList, bytesList, encryptedBytesList, referenceList
    case unknown
    case other

    init(_ bytes: UnsafeBufferPointer<UInt8>?) {
        guard let b = bytes else {
            self = .unknown
            return
        }
        // By length first: one comparison, two at most, instead of one per tag.
        func `is`(_ name: StaticString) -> Bool { JSONReader.equal(b, name) }
        switch b.count {
        case 5: self = `is`("INT64") ? .int64 : `is`("BYTES") ? .bytes : `is`("ASSET") ? .asset : .other
        case 6: self = `is`("STRING") ? .string : `is`("DOUBLE") ? .double : .other
        case 7: self = `is`("ASSETID") ? .asset : .other
        case 8: self = `is`("LOCATION") ? .location : .other
        case 9: self = `is`("TIMESTAMP") ? .timestamp : `is`("REFERENCE") ? .reference : .other
        case 10: self = `is`("INT64_LIST") ? .int64List : `is`("BYTES_LIST") ? .bytesList : .other
        case 11: self = `is`("STRING_LIST") ? .stringList : `is`("DOUBLE_LIST") ? .doubleList : .other
        case 14: self = `is`("TIMESTAMP_LIST") ? .timestampList : `is`("REFERENCE_LIST") ? .referenceList : .other
        case 15: self = `is`("ENCRYPTED_BYTES") ? .encryptedBytes : .other
        case 20: self = `is`("ENCRYPTED_BYTES_LIST") ? .encryptedBytesList : .other
        default: self = .other
        }
    }

    /// The tag as the model spells it (`FieldValue.typeTag`), for the types a column made by
    /// evolution can be made for; nil for the others, which the model then checks.
    var name: String? {
        switch self {
        case .string: return "STRING"
        case .int64: return "INT64"
        case .double: return "DOUBLE"
        case .timestamp: return "TIMESTAMP"
        case .bytes: return "BYTES"
        case .encryptedBytes: return "ENCRYPTED_BYTES"
        case .reference: return "REFERENCE"
        case .location: return "LOCATION"
        case .stringList: return "STRING_LIST"
        case .int64List: return "INT64_LIST"
        case .doubleList: return "DOUBLE_LIST"
        case .timestampList: return "TIMESTAMP_LIST"
        case .bytesList: return "BYTES_LIST"
        case .encryptedBytesList: return "ENCRYPTED_BYTES_LIST"
        case .referenceList: return "REFERENCE_LIST"
        case .asset, .unknown, .other: return nil
        }
    }
}
