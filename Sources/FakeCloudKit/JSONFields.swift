import CloudKitModel

/// The fields as CloudKit's JSON, `{"name":{"type":"STRING","value":"…"},…}`, written record
/// after record straight into the memory the page's records then point into: no String or
/// dictionary per field, and no copy of the page. The pieces are written into the gatherer's
/// room (`JSONBytes.Gatherer.room`) here, where constants of known length are copied inline: a
/// call of the gatherer's `append` per piece took 7.6% of an in-process run (perf), and before
/// that, written through `JSONWriter`'s array, 7%.
///
/// Each field is noted as it is written, as the check of a response's fields would find it
/// (`RawField`: where its name, object, type and value are), so that the page need not be read
/// again to keep its records' fields as JSON: that check took 41% of the source's instructions a
/// record (`Benchmarks/run`: 14,500 of 35,260). A record with anything the check would refuse
/// (a NUL in a text, a double that is no number) is left to the check, which reads it into the
/// model as it would a response's. `FakeFeedTests` holds the notes and the check together.
package struct JSONFields: FakeFieldSink {
    let page = JSONBytes.Gatherer()
    /// Where the next bytes go: the gatherer's room, of which `written` bytes are written and
    /// not committed yet.
    private var room = UnsafeMutableRawBufferPointer(start: nil, count: 0)
    private var written = 0
    /// The bytes committed before the room: the gatherer's `count`, kept here, as reading that
    /// from this module runs the check of exclusive access (5,300 instructions a record,
    /// callgrind, when every field's offsets were noted from it).
    private var committed = 0
    /// What `JSONWriter` writes for the writer, then copied over (text with something to
    /// escape, a double that is no number, a reference's zone); the bytes before `copied` are
    /// copied already. Numbers, plain text and base64 are written straight into the room.
    private var scratch = JSONWriter(capacity: 256)
    private var copied = 0
    /// Where each record's fields are in the page, and which of `noted` are theirs when every
    /// one of them was noted.
    package private(set) var objects: [RecordFields.WrittenFields] = []
    /// The fields of the records written, as the check would find them.
    package private(set) var noted: [RawField] = []
    /// The field being written (a list's elements are part of it), and whether the record's
    /// fields can be kept as noted.
    private var field = RawField(name: 0..<0, objectStart: 0)
    private var plain = true
    /// Where the record being written begins in `noted`.
    private var recordFirstField = 0
    /// Whether a field's value is an object being written, and whether the model would write it
    /// back as it is (see `RawField.objectKeptUpTo`).
    private var inObjectValue = false
    private var objectKept = true
    /// Whether the object or list open now has a member yet.
    private var first = true
    /// The field sets of the zone last written (`FieldSets`), asked of the feed once a page.
    private var setsOfZone: FieldSets.Zone?
    /// The set the record being written takes as it is, without a copy (`FieldSets.Written`).
    private var lent: RawFields?

    init(records: Int) {
        // About 1.2 KB a record of the bench's shape, for at most a page's records (the source
        // asks for one page at a time); a page that writes more grows it.
        page.reserveCapacity(min(records, FakeSettings.pageSizeRange.upperBound) * 1_536)
        // Taken now, so that `put` always has memory to write into, even for no bytes.
        room = page.room(atLeast: 0)
        objects.reserveCapacity(records)
        noted.reserveCapacity(records * 20)
    }

    /// The page's bytes, once every record is written.
    package mutating func finish() -> JSONBytes {
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
        committed += written
        written = 0
        room = page.room(atLeast: max(count, 64 * 1024))
    }

    @inline(__always) private mutating func raw(_ text: StaticString) {
        put(text.utf8Start, count: text.utf8CodeUnitCount)
    }

    /// Where the next byte goes in the page. Offsets are noted as Int32, as the check notes them
    /// (a response is at most 1 GiB); a record that ends past that is left to the check (`end`),
    /// which reads a page of that size into the model, so the offsets noted of it do not matter.
    /// Truncated, moved by wrapping arithmetic and made ranges unchecked, so that such a record
    /// costs nothing more and traps nowhere.
    @inline(__always) private var offset: Int { committed + written }
    @inline(__always) private var here: Int32 { Int32(truncatingIfNeeded: offset) }

    /// Text with nothing JSON escapes (names, hexadecimal, most of the generator's words),
    /// between quotes.
    private mutating func quoted(_ text: UnsafeBufferPointer<UInt8>) {
        raw("\"")
        if let base = text.baseAddress { put(base, count: text.count) }
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

    /// Room for `count` bytes at the next byte, for a value written in place; the caller then
    /// takes what it wrote (`written += n`).
    @inline(__always) private mutating func nextBytes(room count: Int) -> UnsafeMutablePointer<UInt8> {
        if written + count > room.count { moveOn(needing: count) }
        return (room.baseAddress! + written).assumingMemoryBound(to: UInt8.self)
    }

    // Numbers, plain text and base64 are written straight into the page; through the scratch,
    // each was an append to an array (a check of its uniqueness and capacity) and a call of
    // `memcpy` more (`Benchmarks/run`, in-process: 35,921 -> 33,760 instructions a record).

    private mutating func integer(_ value: Int64) {
        let at = nextBytes(room: JSONWriter.mostIntegerBytes)
        let count = JSONWriter.writeInteger(value, at: at)
        noteNumber(UnsafeBufferPointer(start: at, count: count))
        written += count
    }

    private mutating func double(_ value: Double) {
        guard value.isFinite else {
            // JSON has no NaN or infinity, which `JSONWriter` writes as strings: left to the check.
            plain = false
            scratch.writeDouble(value)
            flush()
            return
        }
        let at = nextBytes(room: JSONWriter.mostDoubleBytes)
        let count = JSONWriter.writeFiniteDouble(value, at: at)
        noteNumber(UnsafeBufferPointer(start: at, count: count))
        written += count
    }

    /// Notes whether a number just written in an object value is one the model would write back
    /// as it is. Every number the writer makes is one PostgreSQL's jsonb takes as written (at
    /// most 24 bytes, exponents within ±324), which the check asks too.
    @inline(__always) private mutating func noteNumber(_ number: UnsafeBufferPointer<UInt8>) {
        guard inObjectValue, objectKept else { return }
        objectKept = JSONReader.numberKeepsItsMeaningThroughADouble(number)
    }

    /// A text between quotes: valid UTF-8, as every text the generator makes comes from Swift's
    /// strings. Whether it was written with an escape (notes the field's, when it is one).
    private mutating func string(_ utf8: UnsafeBufferPointer<UInt8>) -> Bool {
        guard JSONWriter.anyNeedsEscaping(utf8) else {
            // The usual case: the text as it is, as `JSONWriter` writes it.
            quoted(utf8)
            return false
        }
        scratch.writeString(utf8: utf8)
        let escaped = noteEscapes(of: utf8)
        flush()
        return escaped
    }

    /// Whether `utf8`, just written into the scratch (not copied yet), was written with an
    /// escape: every escape makes it longer than its bytes between quotes. An escaped NUL is
    /// repaired by the reader (and the record rejected): such a record is left to the check.
    @inline(__always) private mutating func noteEscapes(of utf8: UnsafeBufferPointer<UInt8>) -> Bool {
        let escaped = scratch.bytes.count - copied != utf8.count + 2
        if escaped, utf8.contains(0) { plain = false }
        return escaped
    }

    /// Notes the field's value as the string that ends at the byte before `here`.
    private mutating func noteString(_ name: StaticString?, escaped: Bool) {
        guard name != nil else { return }
        field.stringEnd = here &- 1
        field.stringEscaped = escaped
    }

    private mutating func base64(_ bytes: FakeBytes) {
        raw("\"")
        bytes.withBytes { bytes in
            let count = Base64.encodedCount(bytes.count)
            Base64.encode(bytes, at: nextBytes(room: count))
            written += count
        }
        raw("\"")
    }

    // MARK: Fields

    mutating func begin(capacity: Int) {
        objects.append(RecordFields.WrittenFields(start: offset))
        recordFirstField = noted.count
        plain = true
        raw("{")
        first = true
    }

    mutating func end() {
        raw("}")
        if let object = lent {
            // A set's object, lent rather than copied: the page holds `{}` in its place.
            objects[objects.count - 1].lent = object
            lent = nil
            return
        }
        if offset > Int(Int32.max) { plain = false }
        if plain {
            objects[objects.count - 1].known = (offset, recordFirstField..<noted.count)
        } else {
            noted.removeSubrange(recordFirstField...)
        }
    }

    private mutating func member(_ name: StaticString?, _ type: StaticString) {
        guard let name else {
            if !first { raw(",") }
            first = false
            return
        }
        // `,"name":{"type":"TYPE","value":` in room taken once: a check of the room for each
        // piece cost more than copying it.
        let head: StaticString = "\":{\"type\":\""
        let tail: StaticString = "\",\"value\":"
        let start = here
        let at = nextBytes(room: 2 + name.utf8CodeUnitCount + head.utf8CodeUnitCount + type.utf8CodeUnitCount + tail.utf8CodeUnitCount)
        var n = 0
        @inline(__always) func copy(_ text: StaticString) {
            (at + n).initialize(from: text.utf8Start, count: text.utf8CodeUnitCount)
            n += text.utf8CodeUnitCount
        }
        if !first {
            at[0] = UInt8(ascii: ",")
            n = 1
        }
        first = false
        at[n] = UInt8(ascii: "\"")
        n += 1
        let nameStart = start &+ Int32(truncatingIfNeeded: n)
        copy(name)
        let nameEnd = start &+ Int32(truncatingIfNeeded: n)
        copy(head)
        let tagStart = start &+ Int32(truncatingIfNeeded: n)
        copy(type)
        let tagEnd = start &+ Int32(truncatingIfNeeded: n)
        copy(tail)
        written += n
        field = RawField(name: Range(uncheckedBounds: (nameStart, nameEnd)), objectStart: nameEnd &+ 2)
        field.tag = Range(uncheckedBounds: (tagStart, tagEnd))
        field.value = here
    }

    private mutating func endMember(_ name: StaticString?) {
        guard name != nil else { return }
        raw("}")
        field.objectEnd = here
        noted.append(field)
    }

    /// Begins an object value (a reference, an asset, a location): notes whether the model
    /// would write it back as it is, when it is a field's.
    private mutating func beginObjectValue(_ name: StaticString?) {
        inObjectValue = name != nil
        objectKept = true
    }

    /// Ends an object value, its closing brace just written.
    private mutating func endObjectValue(_ name: StaticString?) {
        guard name != nil else { return }
        inObjectValue = false
        if objectKept { field.objectKeptUpTo = here }
    }

    mutating func text(_ name: StaticString?, _ utf8: UnsafeBufferPointer<UInt8>) {
        member(name, "STRING")
        let escaped = string(utf8)
        noteString(name, escaped: escaped)
        endMember(name)
    }

    /// The unit escaped once, then copied: a very long text is a short one many times.
    mutating func text(_ name: StaticString?, repeating unit: UnsafeBufferPointer<UInt8>, count: Int) {
        member(name, "STRING")
        precondition(copied == scratch.bytes.count, "every write is copied over")
        scratch.writeString(utf8: unit)
        let escaped = noteEscapes(of: unit)
        raw("\"")
        // The unit without its quotes, from a copy of the scratch's bytes, as `put` changes `self`.
        let quotedUnit = scratch.bytes[copied...]
        quotedUnit.withUnsafeBytes { quotedUnit in
            let inner = UnsafeRawBufferPointer(rebasing: quotedUnit[1..<quotedUnit.count - 1])
            for _ in 0..<count { put(inner.baseAddress!, count: inner.count) }
        }
        raw("\"")
        copied = scratch.bytes.count
        noteString(name, escaped: escaped)
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
        noteString(name, escaped: false)
        endMember(name)
    }

    mutating func reference(_ name: StaticString?, _ reference: FakeReference) {
        member(name, "REFERENCE")
        beginObjectValue(name)
        raw("{\"recordName\":")
        Hex.uuid(reference.name.0, reference.name.1) { quoted($0) }
        if let zone = reference.zoneID {
            // Names a program or a settings file gave: a NUL in them is left to the check.
            if zone.zoneName.containsNUL || zone.ownerRecordName.containsNUL || (zone.zoneType?.containsNUL ?? false) { plain = false }
            scratch.writeZoneMember(zone)
            flush()
        }
        raw(",\"action\":\"")
        raw(reference.action)
        raw("\"}")
        endObjectValue(name)
        endMember(name)
    }

    mutating func asset(_ name: StaticString, _ asset: FakeAsset) {
        member(name, "ASSETID")
        beginObjectValue(name)
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
        endObjectValue(name)
        endMember(name)
    }

    mutating func location(_ name: StaticString?, _ location: FakeLocation) {
        member(name, "LOCATION")
        beginObjectValue(name)
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
        endObjectValue(name)
        endMember(name)
    }

    /// The set as it was written once (`FieldSets`), lent whole to the record; one the check would
    /// not keep is copied into the page instead.
    mutating func noteFields(fromSet index: Int, zone: Int, of feed: FakeFeed) {
        let sets: FieldSets.Zone
        if let kept = setsOfZone, kept.zone == zone {
            sets = kept
        } else {
            guard let feedSets = feed.fieldSets else { preconditionFailure("a field set asked of a feed without them") }
            sets = feedSets.zone(zone)
            setsOfZone = sets
        }
        let set = sets.written(index, of: feed)
        guard set.plain else {
            // Copied, and left to the check.
            let text = set.object.page.buffer
            withExtendedLifetime(set.object.page) {
                if text.count > 2 { put(text.baseAddress! + 1, count: text.count - 2) }
            }
            plain = false
            first = text.count <= 2
            return
        }
        lent = set.object
    }

    mutating func beginList(_ name: StaticString, tag: StaticString) {
        member(name, tag)
        raw("[")
        first = true
    }

    mutating func endList() {
        raw("]}")
        field.objectEnd = here
        noted.append(field)
        first = false
    }
}
