/// What PostgreSQL's jsonb takes, for JSON text the server would otherwise refuse at every try of
/// a batch (a value, the fields column, a reject's entry). Measured against PostgreSQL 15:
/// - a container's elements take at most 268,435,455 bytes in the binary form
///   (`JENTRY_OFFLENMASK`: "total size of jsonb array elements exceeds the maximum");
/// - while it parses, the server keeps a container's elements in an array that doubles and may
///   not pass 1 GB (`MaxAllocSize`): a list holds at most 16,777,216 elements (32 bytes each) and
///   an object 8,388,608 members (72 bytes each), past which it fails with "invalid memory alloc
///   request size".
///
/// The binary form is not the text's size: a `0` in a list takes 12 bytes there (its entry and
/// a numeric). `problem(with:)` bounds it as the text plus 12 bytes an element, which no number,
/// string or container passes.
struct JSONBLimits: Sendable {
    let maxBytes: Int
    let maxListElements: Int
    let maxObjectMembers: Int
    /// Text of at most this many bytes fits whatever it holds: each element takes two bytes or
    /// more (`0,`, `"":`), so it has at most half as many elements as bytes. (Worked out once:
    /// it is compared with every jsonb value.)
    let alwaysFits: Int

    init(maxBytes: Int = 268_435_455, maxListElements: Int = 16_777_216, maxObjectMembers: Int = 8_388_608) {
        (self.maxBytes, self.maxListElements, self.maxObjectMembers) = (maxBytes, maxListElements, maxObjectMembers)
        alwaysFits = min((maxBytes - Self.bytesPerElement) / (1 + Self.bytesPerElement / 2), 2 * min(maxListElements, maxObjectMembers) - 1)
    }

    /// The bytes a jsonb's binary form takes for an element beyond its text, at most: the entry
    /// (4) and a numeric's header and padding (8) for a one-digit number.
    static let bytesPerElement = 12

    /// Why text past `maxBytes` is refused.
    var tooLong: String { "the JSON takes more than \(maxBytes.grouped) bytes, more than PostgreSQL's jsonb holds" }

    /// Why PostgreSQL would refuse `text`, valid JSON, as jsonb; nil when it takes it. Longer
    /// text than `alwaysFits` (16 MB) is walked once, counting each container's elements.
    @inline(__always) func problem(with text: UnsafeBufferPointer<UInt8>) -> String? {
        // Inlined, with the bound worked out once, so that a value of a few bytes costs a
        // compare: a call per value, the bound worked out in it and the fields column checked
        // inside its writing took 113 instructions a record in the micro-benchmark (38,497
        // against 38,384, `Benchmarks/run callgrind`); this way 20.
        text.count <= alwaysFits ? nil : problem(withLong: text)
    }

    private func problem(withLong text: UnsafeBufferPointer<UInt8>) -> String? {
        if text.count > maxBytes { return tooLong }
        guard let base = text.baseAddress else { return nil }
        // Each container open: whether it is an object, and the separators met in it.
        var open: [(isObject: Bool, commas: Int, empty: Bool)] = []
        var elements = 1
        var i = 0
        while i < text.count {
            switch base[i] {
            case UInt8(ascii: "\""):
                i += 1
                while i < text.count, base[i] != UInt8(ascii: "\"") { i += base[i] == UInt8(ascii: "\\") ? 2 : 1 }
                if !open.isEmpty { open[open.count - 1].empty = false }
            case UInt8(ascii: "["), UInt8(ascii: "{"):
                if !open.isEmpty { open[open.count - 1].empty = false }
                open.append((base[i] == UInt8(ascii: "{"), 0, true))
            case UInt8(ascii: "]"), UInt8(ascii: "}"):
                guard let closed = open.popLast() else { break }
                // Its first element, after the bracket; the others are counted at their commas.
                if !closed.empty { elements += 1 }
                let count = closed.empty ? 0 : closed.commas + 1
                if closed.isObject, count > maxObjectMembers {
                    return "the JSON holds an object of more than \(maxObjectMembers.grouped) members, more than PostgreSQL's jsonb takes"
                }
                if !closed.isObject, count > maxListElements {
                    return "the JSON holds a list of more than \(maxListElements.grouped) elements, more than PostgreSQL's jsonb takes"
                }
            case UInt8(ascii: ","):
                elements += 1
                if !open.isEmpty { open[open.count - 1].commas += 1 }
            case UInt8(ascii: ":"):
                elements += 1
            case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r"):
                break
            default:
                if !open.isEmpty { open[open.count - 1].empty = false }
            }
            i += 1
        }
        // Every element is the root (the 1 it started at) or comes after a `,`, a `:`, or the
        // bracket that opens a container that is not empty.
        if text.count + Self.bytesPerElement * elements > maxBytes {
            return "the JSON would take more than \(maxBytes.grouped) bytes as PostgreSQL's jsonb, more than it holds "
                + "(its elements take more there than in the text)"
        }
        return nil
    }
}
