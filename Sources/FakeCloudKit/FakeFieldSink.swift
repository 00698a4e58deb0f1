import CloudKitModel

/// Where the generator puts a record's fields, one at a time in the order it draws them: into
/// the model (`ModelFields`, a dictionary of `FieldValue`s, what the fake server renders and the
/// tests compare with) or as the JSON CloudKit sends (`JSONFields`, what the in-process source
/// hands the engine). One generator draws the values for both, so the two cannot disagree.
///
/// A name of nil puts the value into the list begun last (`beginList`) instead of a field.
protocol FakeFieldSink {
    /// Begins a record's fields; `capacity`: how many it may have.
    mutating func begin(capacity: Int)
    mutating func end()
    mutating func text(_ name: StaticString?, _ utf8: UnsafeBufferPointer<UInt8>)
    /// A text of `count` times `unit`.
    mutating func text(_ name: StaticString?, repeating unit: UnsafeBufferPointer<UInt8>, count: Int)
    mutating func int64(_ name: StaticString?, _ value: Int64)
    mutating func double(_ name: StaticString?, _ value: Double)
    mutating func timestamp(_ name: StaticString?, _ milliseconds: Int64)
    mutating func bytes(_ name: StaticString?, _ bytes: FakeBytes, encrypted: Bool)
    mutating func reference(_ name: StaticString?, _ reference: FakeReference)
    mutating func asset(_ name: StaticString, _ asset: FakeAsset)
    mutating func location(_ name: StaticString?, _ location: FakeLocation)
    mutating func beginList(_ name: StaticString, tag: StaticString)
    mutating func endList()
    /// A note's fields from set `index` of `zone`'s (`FakeSettings.fieldSets`).
    mutating func noteFields(fromSet index: Int, zone: Int, of feed: FakeFeed)
}

extension FakeFieldSink {
    /// The set drawn afresh, as it was drawn when first written (`FieldSets`).
    mutating func noteFields(fromSet index: Int, zone: Int, of feed: FakeFeed) {
        FieldSets.draw(index, zone: zone, of: feed, into: &self)
    }

    mutating func text(_ name: StaticString?, literal: StaticString) {
        text(name, UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
    }
}

/// A reference the generator makes: the record's name as the bits `Hex.uuid` spells.
struct FakeReference {
    var name: (UInt64, UInt64)
    var zoneID: ZoneID?
    var action: StaticString

    var model: Reference {
        Reference(recordName: Hex.uuid(name.0, name.1), zoneID: zoneID, action: action.description)
    }
}
