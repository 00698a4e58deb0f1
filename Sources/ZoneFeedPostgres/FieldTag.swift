import CloudKitModel

/// A field's CloudKit type, read from its bytes: the ones written straight from JSON, spelled as
/// `FieldValue.typeTag` spells them, and the rest.
enum FieldTag: String {
    case string = "STRING"
    case int64 = "INT64"
    case double = "DOUBLE"
    case timestamp = "TIMESTAMP"
    case bytes = "BYTES"
    case encryptedBytes = "ENCRYPTED_BYTES"
    case reference = "REFERENCE"
    case assetID = "ASSETID"
    case asset = "ASSET"
    case location = "LOCATION"
    case stringList = "STRING_LIST"
    case int64List = "INT64_LIST"
    case doubleList = "DOUBLE_LIST"
    case timestampList = "TIMESTAMP_LIST"
    case bytesList = "BYTES_LIST"
    case encryptedBytesList = "ENCRYPTED_BYTES_LIST"
    case referenceList = "REFERENCE_LIST"
    /// No type, or a null one: the model's `UNKNOWN`.
    case unknown = "UNKNOWN"
    /// Any other tag, or one written with escapes (its bytes then hold a backslash, which no tag
    /// above has): left to the model, which reads the escapes.
    case other = ""

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
        case 7: self = `is`("ASSETID") ? .assetID : .other
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
}
