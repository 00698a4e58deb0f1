#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

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

    /// The next member of a record's object, or nil at its closing brace; `index` counts the
    /// members read before it. A key written exactly as the member at `index` of the page's
    /// record before this one (`"recordType":`, right after the comma, no space before its
    /// colon) is known by one compare of its bytes. Any other key is read and compared with each
    /// member's name, then remembered at `index` for the record after this one. Reading each key
    /// and comparing it with the names took a third of reading a record's members but its fields
    /// (callgrind).
    mutating func nextRecordMember(at index: Int) throws -> RecordMember? {
        guard try nextMember(closing: UInt8(ascii: "}"), "the object is not closed", "a comma or a closing brace") else { return nil }
        guard let recurring else { return RecordMember(try keyName()) }
        if index < recurring.recordMembers.count, case let predicted = recurring.recordMembers[index], let key = predicted.key,
            case let count = key.utf8CodeUnitCount, position + count <= bytes.count,
            Self.sameBytes(bytes.baseAddress! + position, key.utf8Start, count: count)
        {
            position += count
            return predicted
        }
        let member = RecordMember(try keyName())
        if index < recurring.recordMembers.count {
            recurring.recordMembers[index] = member
        } else if index == recurring.recordMembers.count, index < RecurringStrings.recordMembersKept {
            recurring.recordMembers.append(member)
        }
        return member
    }

    /// The zone of the `zoneID` object that starts here, with the reader past it, when its bytes
    /// are those of the last one read whole (`rememberZone`); nil, with the reader at the value,
    /// otherwise. The same bytes are the same object: the remembered ones are one whole object,
    /// from its brace to the brace that closes it, read without a repair.
    mutating func recurringZone() -> ZoneID? {
        guard let memo = recurring?.zone, let base = bytes.baseAddress else { return nil }
        let start = valueStart()
        let count = memo.json.count
        guard bytes.count - start >= count,
            memo.json.withUnsafeBufferPointer({ memcmp($0.baseAddress!, base + start, count) == 0 })
        else { return nil }
        position = start + count
        return memo.zone
    }

    /// The stamp whose object starts here, with the reader past it, when its bytes are those of
    /// one remembered (`rememberStamp`) but for the timestamp's digits; nil, with the reader
    /// where it was, otherwise. The same bytes around an integer are the same members: the
    /// remembered ones held one timestamp, that integer, and no member but a user and a device.
    mutating func recurringStamp() -> RecordStamp? {
        guard let recurring, !recurring.stamps.shapes.isEmpty else { return nil }
        let start = valueStart()
        // The number after the bytes before it, read once for the shapes whose bytes before it
        // have one length.
        var numberAt = -1
        var number: (timestamp: Int64, end: Int)?
        for shape in recurring.stamps.shapes where bytes.count - start > shape.before {
            if numberAt != start + shape.before {
                numberAt = start + shape.before
                position = numberAt
                if case .int(let timestamp)? = try? readNumber() { number = (timestamp, position) } else { number = nil }
            }
            guard let number, bytes.count - number.end >= shape.after else { continue }
            let before = UnsafeBufferPointer(rebasing: bytes[start..<numberAt])
            let after = UnsafeBufferPointer(rebasing: bytes[number.end..<number.end + shape.after])
            if let stamp = recurring.stamps.find(before: before, after: after) {
                position = number.end + shape.after
                return RecordStamp(timestamp: number.timestamp, userRecordName: stamp.user, deviceID: stamp.device)
            }
        }
        position = start
        return nil
    }

    /// Remembers the stamp read from `start` to here, whose timestamp's number lies in
    /// `number`, as naming `user` and `device`.
    mutating func rememberStamp(from start: Int, number: Range<Int>, user: String?, device: String?) {
        guard let recurring, start <= number.lowerBound, number.upperBound <= position else { return }
        recurring.stamps.remember(
            before: UnsafeBufferPointer(rebasing: bytes[start..<number.lowerBound]),
            after: UnsafeBufferPointer(rebasing: bytes[number.upperBound..<position]), user: user, device: device)
    }

    /// Remembers `zone` as the object between `start` and here, when it is short enough.
    mutating func rememberZone(_ zone: ZoneID, from start: Int) {
        guard let recurring, position - start <= RecurringStrings.longestZone, position > start else { return }
        recurring.zone = (Array(bytes[start..<position]), zone)
    }
}
