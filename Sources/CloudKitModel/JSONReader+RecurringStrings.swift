extension JSONReader {
    /// `readString` for text that recurs from record to record: plain ASCII text is shared
    /// through the page's `RecurringStrings`; anything else is read as `readString` reads it.
    public mutating func readRecurringString() throws -> String {
        guard let recurring, peek() == UInt8(ascii: "\"") else { return try readString() }
        let start = position + 1
        let before = position
        position = start
        var seen: UInt64 = 0
        skipPlainStringBytes(orInto: &seen)
        guard position < bytes.count, bytes[position] == UInt8(ascii: "\""), seen & 0x8080_8080_8080_8080 == 0 else {
            position = before
            return try readString()
        }
        let text = UnsafeBufferPointer(rebasing: bytes[start..<position])
        position += 1
        return recurring.string(for: text)
    }
}
