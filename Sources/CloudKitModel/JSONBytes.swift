/// A response body kept whole, so that the records read from it can keep their fields as the
/// JSON they came in (`RawFields`) and a destination can read them from there, once, instead of
/// the reader building a dictionary and a `String` per field that are dropped a moment later.
///
/// The bytes are copied in once and never change; the memory lives as long as the last record
/// that points into it.
public final class JSONBytes: @unchecked Sendable {
    // @unchecked: the buffer is written only in `init` and read-only afterwards.
    public let buffer: UnsafeBufferPointer<UInt8>

    public init(copying bytes: UnsafeRawBufferPointer) {
        let storage = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: max(1, bytes.count))
        if let base = bytes.baseAddress, bytes.count > 0 {
            storage.baseAddress!.initialize(from: base.assumingMemoryBound(to: UInt8.self), count: bytes.count)
        }
        buffer = UnsafeBufferPointer(start: storage.baseAddress, count: bytes.count)
    }

    public static func copying(_ bytes: [UInt8]) -> JSONBytes {
        bytes.withUnsafeBytes { JSONBytes(copying: $0) }
    }

    deinit { UnsafeMutableBufferPointer(mutating: buffer).deallocate() }

    /// A reader over the bytes that makes the records it reads point into them.
    public func reader() -> JSONReader { JSONReader(buffer, owner: self) }
}
