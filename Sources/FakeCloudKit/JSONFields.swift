import CloudKitModel

/// The fields as CloudKit's JSON, `{"name":{"type":"STRING","value":"…"},…}`, written record
/// after record straight into the memory the page's records then point into: no String or
/// dictionary per field, and no copy of the page. The pieces are written into the gatherer's
/// room (`JSONBytes.Gatherer.room`) here, where constants of known length are copied inline: a
/// call of the gatherer's `append` per piece took 7.6% of an in-process run (perf), and before
/// that, written through `JSONWriter`'s array, 7%.
struct JSONFields: FakeFieldSink {
    let page = JSONBytes.Gatherer()
    /// Where the next bytes go: the gatherer's room, of which `written` bytes are written and
    /// not committed yet.
    private var room = UnsafeMutableRawBufferPointer(start: nil, count: 0)
    private var written = 0
    /// Numbers and text are written here first, by `JSONWriter`'s rules, then copied over; the
    /// bytes before `copied` are copied already.
    private var scratch = JSONWriter(capacity: 256)
    private var copied = 0
    /// Where each record's fields begin in the page.
    private(set) var starts: [Int] = []
    /// Whether the object or list open now has a member yet.
    private var first = true

    init(records: Int) {
        // About 1.2 KB a record of the bench's shape, for at most a page's records (the source
        // asks for one page at a time); a page that writes more grows it.
        page.reserveCapacity(min(records, FakeSettings.pageSizeRange.upperBound) * 1_536)
        // Taken now, so that `put` always has memory to write into, even for no bytes.
        room = page.room(atLeast: 0)
        starts.reserveCapacity(records)
    }

    /// The page's bytes, once every record is written.
    mutating func finish() -> JSONBytes {
        page.commit(written)
        room = UnsafeMutableRawBufferPointer(start: nil, count: 0)
        written = 0
        return page.finish()
    }

    // MARK: Writing

    @inline(__always) private mutating func put(_ bytes: UnsafeRawPointer, count: Int) {
        if written + count > room.count { moveOn(needing: count) }
        (room.baseAddress! + written).copyMemory(from: bytes, byteCount: count)
        written += count
    }

    /// Commits what is written and takes a new room of at least `count` bytes.
    @inline(never) private mutating func moveOn(needing count: Int) {
        page.commit(written)
        written = 0
        room = page.room(atLeast: max(count, 64 * 1024))
    }

    @inline(__always) private mutating func raw(_ text: StaticString) {
        put(text.utf8Start, count: text.utf8CodeUnitCount)
    }

    /// Text the generator made of ASCII letters, digits and punctuation that JSON does not
    /// escape (names, hexadecimal), between quotes.
    private mutating func quoted(_ ascii: UnsafeBufferPointer<UInt8>) {
        raw("\"")
        if let base = ascii.baseAddress { put(base, count: ascii.count) }
        raw("\"")
    }

    private mutating func flush() {
        let count = scratch.bytes.count - copied
        guard count > 0 else { return }
        scratch.bytes.withUnsafeBytes { put($0.baseAddress! + copied, count: count) }
        copied = scratch.bytes.count
        // Emptied now and then rather than after every value: emptying an array is a call.
        if copied >= 4096 {
            scratch.bytes.removeAll(keepingCapacity: true)
            copied = 0
        }
    }

    private mutating func integer(_ value: Int64) {
        scratch.writeInteger(value)
        flush()
    }

    private mutating func double(_ value: Double) {
        scratch.writeDouble(value)
        flush()
    }

    private mutating func string(_ utf8: UnsafeBufferPointer<UInt8>) {
        scratch.writeString(utf8: utf8)
        flush()
    }

    private mutating func base64(_ bytes: FakeBytes) {
        raw("\"")
        bytes.withBytes { Base64.encode($0, appendingTo: &scratch.bytes) }
        flush()
        raw("\"")
    }

    // MARK: Fields

    mutating func begin(capacity: Int) {
        starts.append(page.count + written)
        raw("{")
        first = true
    }

    mutating func end() { raw("}") }

    private mutating func member(_ name: StaticString?, _ type: StaticString) {
        if !first { raw(",") }
        first = false
        guard let name else { return }
        raw("\"")
        raw(name)
        raw("\":{\"type\":\"")
        raw(type)
        raw("\",\"value\":")
    }

    private mutating func endMember(_ name: StaticString?) {
        if name != nil { raw("}") }
    }

    mutating func text(_ name: StaticString?, _ utf8: UnsafeBufferPointer<UInt8>) {
        member(name, "STRING")
        string(utf8)
        endMember(name)
    }

    /// The unit escaped once, then copied: a very long text is a short one many times.
    mutating func text(_ name: StaticString?, repeating unit: UnsafeBufferPointer<UInt8>, count: Int) {
        member(name, "STRING")
        precondition(copied == scratch.bytes.count, "every write is copied over")
        scratch.writeString(utf8: unit)
        raw("\"")
        // The unit without its quotes, from a copy of the scratch's bytes, as `put` changes `self`.
        let quotedUnit = scratch.bytes[copied...]
        quotedUnit.withUnsafeBytes { quotedUnit in
            let inner = UnsafeRawBufferPointer(rebasing: quotedUnit[1..<quotedUnit.count - 1])
            for _ in 0..<count { put(inner.baseAddress!, count: inner.count) }
        }
        raw("\"")
        copied = scratch.bytes.count
        endMember(name)
    }

    mutating func int64(_ name: StaticString?, _ value: Int64) {
        member(name, "INT64")
        integer(value)
        endMember(name)
    }

    mutating func double(_ name: StaticString?, _ value: Double) {
        member(name, "DOUBLE")
        double(value)
        endMember(name)
    }

    mutating func timestamp(_ name: StaticString?, _ milliseconds: Int64) {
        member(name, "TIMESTAMP")
        integer(milliseconds)
        endMember(name)
    }

    mutating func bytes(_ name: StaticString?, _ bytes: FakeBytes, encrypted: Bool) {
        member(name, encrypted ? "ENCRYPTED_BYTES" : "BYTES")
        base64(bytes)
        endMember(name)
    }

    mutating func reference(_ name: StaticString?, _ reference: FakeReference) {
        member(name, "REFERENCE")
        raw("{\"recordName\":")
        Hex.uuid(reference.name.0, reference.name.1) { quoted($0) }
        if let zone = reference.zoneID {
            scratch.writeZoneMember(zone)
            flush()
        }
        raw(",\"action\":\"")
        raw(reference.action)
        raw("\"}")
        endMember(name)
    }

    mutating func asset(_ name: StaticString, _ asset: FakeAsset) {
        member(name, "ASSETID")
        raw("{\"fileChecksum\":")
        base64(asset.fileChecksum)
        raw(",\"size\":")
        integer(asset.size)
        raw(",\"referenceChecksum\":")
        base64(asset.referenceChecksum)
        raw(",\"wrappingKey\":")
        base64(asset.wrappingKey)
        raw(",\"receipt\":")
        Hex.short(asset.receipt) { quoted($0) }
        raw(",\"downloadURL\":")
        FakeAsset.downloadURL(asset.download) { quoted($0) }
        raw("}")
        endMember(name)
    }

    mutating func location(_ name: StaticString?, _ location: FakeLocation) {
        member(name, "LOCATION")
        raw("{\"latitude\":")
        double(location.latitude)
        raw(",\"longitude\":")
        double(location.longitude)
        raw(",\"horizontalAccuracy\":")
        double(location.horizontalAccuracy)
        raw(",\"verticalAccuracy\":")
        double(location.verticalAccuracy)
        raw(",\"altitude\":")
        double(location.altitude)
        raw(",\"speed\":")
        double(0)
        raw(",\"course\":")
        double(location.course)
        raw(",\"timestamp\":")
        integer(location.timestamp)
        raw("}")
        endMember(name)
    }

    mutating func beginList(_ name: StaticString, tag: StaticString) {
        member(name, tag)
        raw("[")
        first = true
    }

    mutating func endList() {
        raw("]}")
        first = false
    }
}
