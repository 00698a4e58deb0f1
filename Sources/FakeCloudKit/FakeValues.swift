import CloudKitModel

/// SplitMix64: a small, fast, well-mixed generator; the fake feed's only source of variety.
struct SplitMix {
    var state: UInt64

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        return SplitMix.mix(state)
    }

    static func mix(_ x: UInt64) -> UInt64 {
        var z = x
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A hash of a few values. Fixed arities rather than a variadic parameter: a variadic call
    /// builds an array on the heap, and the generator hashes several times per record.
    static func hash(_ a: UInt64, _ b: UInt64) -> UInt64 { absorb(absorb(start, a), b) }
    static func hash(_ a: UInt64, _ b: UInt64, _ c: UInt64) -> UInt64 { absorb(hash(a, b), c) }
    static func hash(_ a: UInt64, _ b: UInt64, _ c: UInt64, _ d: UInt64) -> UInt64 { absorb(hash(a, b, c), d) }
    static func hash(_ a: UInt64, _ b: UInt64, _ c: UInt64, _ d: UInt64, _ e: UInt64) -> UInt64 { absorb(hash(a, b, c, d), e) }

    static let start: UInt64 = 0x243F_6A88_85A3_08D3

    static func absorb(_ h: UInt64, _ v: UInt64) -> UInt64 { mix(h ^ mix(v &+ 0x9E37_79B9_7F4A_7C15)) }
}

/// Builds a text from bytes written into a stack buffer and hands it over as UTF-8: to a page of
/// JSON without any allocation, or made a `String` in one go (at most one allocation, none for
/// the strings of up to 15 bytes that Swift keeps inline), where appending to a `String` piece
/// by piece reallocates and takes the generic append path. The generator makes several texts
/// per record this way.
struct TextBuilder {
    private let buffer: UnsafeMutableBufferPointer<UInt8>
    private var count = 0

    private init(buffer: UnsafeMutableBufferPointer<UInt8>) {
        self.buffer = buffer
    }

    /// Hands the text `body` writes to `use`, without making a String; writing more than
    /// `capacity` bytes traps.
    static func withText<R>(capacity: Int, _ body: (inout TextBuilder) -> Void, use: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: capacity) { buffer in
            var builder = TextBuilder(buffer: buffer)
            body(&builder)
            return use(UnsafeBufferPointer(rebasing: buffer[..<builder.count]))
        }
    }

    /// Room for `n` more bytes. Checked in release builds too: the buffer is unsafe memory.
    private func reserve(_ n: Int) {
        precondition(count + n <= buffer.count, "TextBuilder capacity exceeded")
    }

    mutating func append(_ byte: UInt8) {
        reserve(1)
        buffer[count] = byte
        count += 1
    }

    mutating func append(_ text: StaticString) {
        reserve(text.utf8CodeUnitCount)
        UnsafeMutableRawPointer(buffer.baseAddress! + count).copyMemory(from: text.utf8Start, byteCount: text.utf8CodeUnitCount)
        count += text.utf8CodeUnitCount
    }

    /// The low `nibbles` (at most 16) hexadecimal digits of `value`, most significant first.
    @inline(__always) mutating func appendHex(_ value: UInt64, nibbles: Int, uppercase: Bool) {
        precondition(nibbles <= 16, "a UInt64 has sixteen hexadecimal digits")
        reserve(nibbles)
        var digits = (Hex.digits(UInt32(truncatingIfNeeded: value >> 32), uppercase), Hex.digits(UInt32(truncatingIfNeeded: value), uppercase))
        withUnsafeBytes(of: &digits) { all in
            UnsafeMutableRawPointer(buffer.baseAddress! + count).copyMemory(from: all.baseAddress! + (16 - nibbles), byteCount: nibbles)
        }
        count += nibbles
    }

    mutating func appendDecimal(_ value: UInt64) {
        var digits = 1
        var rest = value / 10
        while rest > 0 {
            digits += 1
            rest /= 10
        }
        reserve(digits)
        var v = value
        for i in stride(from: digits - 1, through: 0, by: -1) {
            buffer[count + i] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: v % 10)
            v /= 10
        }
        count += digits
    }
}

package enum Hex {
    /// The eight hexadecimal digits of `value` as the bytes of a word, most significant first in
    /// memory, made a word at a time: digit by digit, with a table, they were about 11
    /// instructions each and 6% of the in-process source's instructions a record
    /// (`Benchmarks/run`).
    @inline(__always) static func digits(_ value: UInt32, _ uppercase: Bool) -> UInt64 {
        // Each digit's four bits spread to a byte of their own, the lowest digit in the lowest byte.
        var x = UInt64(value)
        x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF
        x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF
        x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F
        // 1 in each byte whose digit is 10 or more (no byte carries into the next: 15 + 6 < 256).
        let letters = ((x &+ 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101
        let ascii = x &+ 0x3030_3030_3030_3030 &+ letters &* (uppercase ? 7 : 39)  // "0" + d, or "A"/"a" + d - 10
        return ascii.bigEndian  // the highest digit first in memory
    }

    /// An upper-case UUID-shaped name, as CloudKit apps usually make.
    package static func uuid(_ a: UInt64, _ b: UInt64) -> String { uuid(a, b) { String(decoding: $0, as: UTF8.self) } }

    /// `uuid(a, b)`'s text, handed to `use`.
    static func uuid<R>(_ a: UInt64, _ b: UInt64, _ use: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        TextBuilder.withText(capacity: 36) { text in
            text.appendHex(a >> 32, nibbles: 8, uppercase: true)
            text.append(UInt8(ascii: "-"))
            text.appendHex(a >> 16, nibbles: 4, uppercase: true)
            text.append(UInt8(ascii: "-"))
            text.appendHex(a, nibbles: 4, uppercase: true)
            text.append(UInt8(ascii: "-"))
            text.appendHex(b >> 48, nibbles: 4, uppercase: true)
            text.append(UInt8(ascii: "-"))
            text.appendHex(b, nibbles: 12, uppercase: true)
        } use: {
            use($0)
        }
    }

    /// The low 32 bits in lower-case hexadecimal.
    package static func short(_ v: UInt64) -> String { short(v) { String(decoding: $0, as: UTF8.self) } }

    /// `short(v)`'s text, handed to `use`.
    static func short<R>(_ v: UInt64, _ use: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        TextBuilder.withText(capacity: 8) {
            $0.appendHex(v, nibbles: 8, uppercase: false)
        } use: {
            use($0)
        }
    }
}

enum FakeText {
    static let words: [StaticString] = [
        "note", "plan", "idea", "draft", "list", "garden", "recipe", "travel", "budget", "meeting",
        "café", "naïve", "日本語", "メモ", "Zürich", "😀", "crème brûlée", "Ελληνικά", "עברית", "한국어",
        "\"quoted\"", "back\\slash", "tab\there", "line\nbreak", "{braces}", "comma,separated",
    ]
    /// The longest word's UTF-8 length, plus one for the space before it.
    static let longestWord = words.map(\.utf8CodeUnitCount).max()! + 1

    /// `count` words separated by spaces, one draw each.
    static func append(_ r: inout SplitMix, words count: Int, to text: inout TextBuilder) {
        let table: [StaticString] = words  // one lazy-global check per call rather than per word
        for i in 0..<count {
            if i > 0 { text.append(UInt8(ascii: " ")) }
            text.append(table[Int(r.next() % UInt64(table.count))])
        }
    }

    /// One word, one draw.
    static func word(_ r: inout SplitMix) -> StaticString { words[Int(r.next() % UInt64(words.count))] }

    static func words(_ r: inout SplitMix, count: Int) -> String {
        words(&r, count: count) { String(decoding: $0, as: UTF8.self) }
    }

    /// `count` words separated by spaces, handed to `use`.
    static func words<R>(_ r: inout SplitMix, count: Int, _ use: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        TextBuilder.withText(capacity: count * longestWord) {
            append(&r, words: count, to: &$0)
        } use: {
            use($0)
        }
    }

    /// One to four words and ` #n`: the word count is drawn first, the number last.
    static func title<R>(_ r: inout SplitMix, _ use: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        let count = 1 + Int(r.next() % 4)
        return TextBuilder.withText(capacity: count * longestWord + 5) { text in
            append(&r, words: count, to: &text)
            text.append(" #")
            text.appendDecimal(r.next() % 1000)
        } use: {
            use($0)
        }
    }

    /// Three to fourteen words and a full stop.
    static func sentence<R>(_ r: inout SplitMix, _ use: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        let count = 3 + Int(r.next() % 12)
        return TextBuilder.withText(capacity: count * longestWord + 1) { text in
            append(&r, words: count, to: &text)
            text.append(".")
        } use: {
            use($0)
        }
    }
}

/// `count` (at most 24) bytes drawn from the generator: the little-endian bytes of successive
/// draws, one draw per 8 bytes, and one even for no bytes. Kept as the draws until a sink
/// writes them (as base64, into a String or straight into a page).
struct FakeBytes {
    private var words: (UInt64, UInt64, UInt64)
    let count: Int

    static func draw(_ r: inout SplitMix, count: Int) -> FakeBytes {
        precondition(count <= 24, "FakeBytes makes at most 24 bytes")
        var words = (r.next().littleEndian, UInt64(0), UInt64(0))
        if count > 8 { words.1 = r.next().littleEndian }
        if count > 16 { words.2 = r.next().littleEndian }
        return FakeBytes(words: words, count: count)
    }

    func withBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        withUnsafeBytes(of: words) { body(UnsafeRawBufferPointer(rebasing: $0[..<count])) }
    }

    var base64: String {
        var text: [UInt8] = []
        withBytes { Base64.encode($0, appendingTo: &text) }
        return String(decoding: text, as: UTF8.self)
    }
}

/// An `ASSETID` value as `records/changes` returns it, as drawn.
struct FakeAsset {
    var fileChecksum: FakeBytes
    var size: Int64
    var referenceChecksum: FakeBytes
    var wrappingKey: FakeBytes
    var receipt: UInt64
    var download: UInt64

    static func draw(_ r: inout SplitMix) -> FakeAsset {
        let fileChecksum = FakeBytes.draw(&r, count: 20)
        let size = Int64(r.next() % 50_000_000)
        let referenceChecksum = FakeBytes.draw(&r, count: 20)
        let wrappingKey = FakeBytes.draw(&r, count: 16)
        let receipt = r.next()
        return FakeAsset(
            fileChecksum: fileChecksum, size: size, referenceChecksum: referenceChecksum, wrappingKey: wrappingKey, receipt: receipt,
            download: r.next())
    }

    static let prototype = DictionaryPrototype<JSONValue>(
        keys: ["fileChecksum", "size", "referenceChecksum", "wrappingKey", "receipt", "downloadURL"], placeholder: .null)

    var json: JSONValue {
        .object(
            Self.prototype.make([
                .string(fileChecksum.base64), .int(size), .string(referenceChecksum.base64), .string(wrappingKey.base64),
                .string(Hex.short(receipt)), .string(Self.downloadURL(download)),
            ]))
    }

    /// `https://cvws.icloud-content.com/B/{hex}/${f}?o=1`, CloudKit's download URL template.
    static func downloadURL<R>(_ v: UInt64, _ use: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        TextBuilder.withText(capacity: 56) { text in
            text.append("https://cvws.icloud-content.com/B/")
            text.appendHex(v, nibbles: 8, uppercase: false)
            text.append("/${f}?o=1")
        } use: {
            use($0)
        }
    }

    static func downloadURL(_ v: UInt64) -> String { downloadURL(v) { String(decoding: $0, as: UTF8.self) } }
}

/// A `LOCATION` value, as drawn.
struct FakeLocation {
    var latitude: Double
    var longitude: Double
    var horizontalAccuracy: Double
    var verticalAccuracy: Double
    var altitude: Double
    var course: Double
    var timestamp: Int64

    static func draw(_ r: inout SplitMix) -> FakeLocation {
        let latitude = Double(Int64(r.next() % 180_000_000) - 90_000_000) / 1_000_000
        let longitude = Double(Int64(r.next() % 360_000_000) - 180_000_000) / 1_000_000
        let horizontalAccuracy = Double(r.next() % 100)
        let verticalAccuracy = Double(r.next() % 100)
        let altitude = Double(r.next() % 4000)
        let course = Double(r.next() % 360)
        return FakeLocation(
            latitude: latitude, longitude: longitude, horizontalAccuracy: horizontalAccuracy, verticalAccuracy: verticalAccuracy,
            altitude: altitude, course: course, timestamp: 1_650_000_000_000 + Int64(r.next() % 10_000_000_000))
    }

    static let prototype = DictionaryPrototype<JSONValue>(
        keys: ["latitude", "longitude", "horizontalAccuracy", "verticalAccuracy", "altitude", "speed", "course", "timestamp"],
        placeholder: .null)

    var json: JSONValue {
        .object(
            Self.prototype.make([
                .double(latitude), .double(longitude), .double(horizontalAccuracy), .double(verticalAccuracy), .double(altitude),
                .double(0), .double(course), .int(timestamp),
            ]))
    }
}

/// A dictionary with a fixed set of keys, made by copying a prototype and setting its values in
/// place: no key is hashed, where a dictionary literal hashes every key of every value made.
/// Most notes carry an asset and a location (6 and 8 keys), made this way in the model.
struct DictionaryPrototype<Value: Sendable>: Sendable {
    let prototype: [String: Value]
    /// Where each key's value lives in the prototype, in the order of the keys.
    let slots: [Dictionary<String, Value>.Index]

    init(keys: [String], placeholder: Value) {
        var prototype = [String: Value](minimumCapacity: keys.count)
        for key in keys { prototype[key] = placeholder }
        self.prototype = prototype
        slots = keys.map { prototype.index(forKey: $0)! }
    }

    /// The dictionary with `values` for the keys, in order.
    func make(_ values: consuming [Value]) -> [String: Value] {
        precondition(values.count == slots.count, "one value per key")
        var dictionary = prototype
        // Swapped rather than assigned: the values move without being retained and released.
        for i in slots.indices { swap(&dictionary.values[slots[i]], &values[i]) }
        return dictionary
    }
}
