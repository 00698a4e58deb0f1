/// A field's type: a primitive, perhaps `ENCRYPTED`, perhaps in a `LIST<…>`.
public struct FieldType: Sendable, Hashable, CustomStringConvertible {
    public enum Primitive: String, Sendable, Hashable, CaseIterable {
        case asset = "ASSET"
        case bytes = "BYTES"
        case double = "DOUBLE"
        case int64 = "INT64"
        case location = "LOCATION"
        case number = "NUMBER"
        case reference = "REFERENCE"
        case string = "STRING"
        case timestamp = "TIMESTAMP"

        /// The primitives `ENCRYPTED` may qualify.
        public static let encryptable: [Primitive] = [.bytes, .string, .double, .int64, .location, .timestamp]
    }

    public var primitive: Primitive
    public var encrypted: Bool
    /// `NUMBER PREFERRED AS INT64` or `… AS DOUBLE`; nil otherwise.
    public var preferred: Primitive?
    public var isList: Bool

    public init(_ primitive: Primitive, encrypted: Bool = false, preferred: Primitive? = nil, isList: Bool = false) {
        self.primitive = primitive
        self.encrypted = encrypted
        self.preferred = preferred
        self.isList = isList
    }

    /// As the schema language writes it: `LIST<ENCRYPTED STRING>`, `NUMBER PREFERRED AS INT64`.
    public var description: String {
        var text = (encrypted ? "ENCRYPTED " : "") + primitive.rawValue
        if let preferred { text += " PREFERRED AS \(preferred.rawValue)" }
        return isList ? "LIST<\(text)>" : text
    }

    /// The type tag CloudKit Web Services sends with such a field's values (`STRING`,
    /// `INT64_LIST`, `ASSETID`, `ENCRYPTED_BYTES`). A `NUMBER` is sent as what it is preferred
    /// as, `DOUBLE` when nothing is preferred. An encrypted value travels decrypted (the server
    /// does the cryptography; values are plaintext over TLS) with its plain tag, except bytes:
    /// `ENCRYPTED_BYTES` has been observed on iCloud.com (cloudkit-web-services.md, 3.2).
    public var typeTag: String {
        var tag: String
        switch primitive {
        case .asset: tag = "ASSETID"
        case .number: tag = (preferred ?? .double).rawValue
        case .bytes where encrypted: tag = "ENCRYPTED_BYTES"
        default: tag = primitive.rawValue
        }
        if isList { tag += "_LIST" }
        return tag
    }
}
