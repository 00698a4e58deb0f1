import CloudKitModel

/// The fields as a dictionary of the model.
struct ModelFields: FakeFieldSink {
    var fields: [String: FieldValue] = [:]
    private var list: (name: String, tag: String, items: [FieldValue])?

    mutating func begin(capacity: Int) {
        fields = Dictionary(minimumCapacity: capacity)
    }

    mutating func end() {}

    private mutating func put(_ name: StaticString?, _ value: FieldValue) {
        if let name {
            fields[name.description] = value
        } else {
            precondition(list != nil, "a value without a name goes into the list begun last")
            list?.items.append(value)
        }
    }

    mutating func text(_ name: StaticString?, _ utf8: UnsafeBufferPointer<UInt8>) {
        put(name, .string(String(decoding: utf8, as: UTF8.self)))
    }
    mutating func text(_ name: StaticString?, repeating unit: UnsafeBufferPointer<UInt8>, count: Int) {
        put(name, .string(String(repeating: String(decoding: unit, as: UTF8.self), count: count)))
    }
    mutating func int64(_ name: StaticString?, _ value: Int64) { put(name, .int64(value)) }
    mutating func double(_ name: StaticString?, _ value: Double) { put(name, .double(value)) }
    mutating func timestamp(_ name: StaticString?, _ milliseconds: Int64) { put(name, .timestamp(milliseconds)) }
    mutating func bytes(_ name: StaticString?, _ bytes: FakeBytes, encrypted: Bool) {
        let base64 = bytes.base64
        put(name, encrypted ? .encryptedBytes(base64) : .bytes(base64))
    }
    mutating func reference(_ name: StaticString?, _ reference: FakeReference) { put(name, .reference(reference.model)) }
    mutating func asset(_ name: StaticString, _ asset: FakeAsset) { put(name, .asset(tag: "ASSETID", asset.json)) }
    mutating func location(_ name: StaticString?, _ location: FakeLocation) { put(name, .location(location.json)) }

    mutating func beginList(_ name: StaticString, tag: StaticString) {
        list = (name.description, tag.description, [])
    }

    mutating func endList() {
        guard let list else { return }
        fields[list.name] = .list(tag: list.tag, list.items)
        self.list = nil
    }
}
