import CloudKitModel
import FakeCloudKit
import Foundation
import Testing
import ZoneFeed

@Suite struct FakeFeedTests {
    @Test func theSameSettingsGiveTheSameFeed() async throws {
        let settings = FakeSettings(seed: 99, zones: 2, recordsPerZone: 1_000)
        let a = try await pages(FakeSource(settings: settings), zone: "Zone02")
        let b = try await pages(FakeSource(settings: settings), zone: "Zone02")
        #expect(a == b)
        let other = try await pages(FakeSource(settings: FakeSettings(seed: 100, zones: 2, recordsPerZone: 1_000)), zone: "Zone02")
        #expect(a != other)
    }

    @Test func pagesRespectTheLimitAndEndWithMoreComingFalse() async throws {
        for pageSize in [1, 7, 50, 200] {
            let feed = try await pages(FakeSource(settings: FakeSettings(zones: 1, recordsPerZone: 1_003, pageSize: pageSize)), zone: "Zone01")
            #expect(feed.allSatisfy { $0.entries.count <= pageSize && !$0.entries.isEmpty })
            #expect(feed.reduce(0) { $0 + $1.entries.count } == 1_003)
            #expect(feed.last?.moreComing == false)
            #expect(feed.dropLast().allSatisfy { $0.moreComing })
        }
    }

    @Test func withoutChurnEveryEntryCreatesADistinctRecordInFullPages() async throws {
        let feed = try await pages(FakeSource(settings: FakeSettings(zones: 1, recordsPerZone: 1_050, pageSize: 200, churn: false)), zone: "Zone01")
        #expect(feed.map(\.entries.count) == [200, 200, 200, 200, 200, 50])
        var names = Set<String>()
        for entry in feed.flatMap(\.entries) {
            guard case .record(let record) = entry else {
                Issue.record("a feed without churn holds only records, not \(entry)")
                continue
            }
            names.insert(record.recordName)
        }
        #expect(names.count == 1_050)
    }

    @Test func theFeedHoldsEveryKindOfChangeAndEveryFieldType() async throws {
        let feed = try await pages(FakeSource(settings: FakeSettings(zones: 1, recordsPerZone: 5_000)), zone: "Zone01")
        var created = Set<String>()
        var deleted = Set<String>()
        var recreated = 0
        var sameRecordTwiceInOnePage = 0
        var tags = Set<String>()
        var extremes = Set<Int64>()
        var nonASCII = false
        for page in feed {
            var inPage = Set<String>()
            for entry in page.entries {
                switch entry {
                case .record(let r):
                    if deleted.contains(r.recordName) { recreated += 1 }
                    if !inPage.insert(r.recordName).inserted { sameRecordTwiceInOnePage += 1 }
                    created.insert(r.recordName)
                    for value in r.fields.values {
                        tags.insert(value.typeTag)
                        if case .int64(let i) = value, i == .max || i == .min { extremes.insert(i) }
                        if case .string(let s) = value, s.unicodeScalars.contains(where: { !$0.isASCII }) { nonASCII = true }
                    }
                case .deleted(let name):
                    deleted.insert(name)
                case .error, .unreadable:
                    break
                }
            }
        }
        #expect(!deleted.isEmpty && recreated > 0 && sameRecordTwiceInOnePage > 0)
        #expect(
            Set([
                "STRING", "INT64", "DOUBLE", "TIMESTAMP", "BYTES", "ENCRYPTED_BYTES", "REFERENCE", "ASSETID", "LOCATION",
                "STRING_LIST", "INT64_LIST", "DOUBLE_LIST", "TIMESTAMP_LIST", "BYTES_LIST", "REFERENCE_LIST", "LOCATION_LIST",
            ])
            .isSubset(of: tags))
        #expect(extremes == [.max, .min])
        #expect(nonASCII)
    }

    @Test func entryNamesNameEveryEntryAsTheEntriesDo() {
        for churn in [true, false] {
            let feed = FakeFeed(settings: FakeSettings(seed: 3, zones: 2, recordsPerZone: 2_000, pageSize: 50, churn: churn))
            let entries = feed.entries(zone: 1, range: 100..<2_000)
            let names = feed.entryNames(zone: 1, range: 100..<2_000)
            #expect(names.map(\.name) == entries.map { RecordNameKey($0.recordName!) })
            #expect(names.map(\.isDeletion) == entries.map { if case .deleted = $0 { true } else { false } })
            #expect(names.contains { $0.isDeletion } == churn)
        }
    }

    @Test(arguments: [nil, 37] as [Int?])
    func theInProcessSourceHandsOverTheModelsRecordsAsCloudKitsJSON(fieldSets: Int?) throws {
        for churn in [true, false] {
            let feed = FakeFeed(
                settings: FakeSettings(seed: 5, zones: 2, recordsPerZone: 3_000, pageSize: 200, badRecordEvery: 20, churn: churn, fieldSets: fieldSets))
            for range in [0..<200, 200..<1_000, 2_950..<3_000] {
                let model = feed.entries(zone: 1, range: range)
                let json = try feed.entriesWithJSONFields(zone: 1, range: range)
                #expect(json == model, "the same entries, field for field (churn: \(churn), \(range))")
                // `==` takes -0.0 for 0.0, and a zone without its type for one with it: written out
                // as CloudKit's JSON (keys sorted), the two must be the same text.
                #expect(json.map(\.json.jsonText) == model.map(\.json.jsonText), "the same wire form (churn: \(churn), \(range))")
                var kept = 0
                var inTheModel = 0
                for case .record(let record) in json {
                    if case .json = record.storedFields { kept += 1 } else { inTheModel += 1 }
                }
                // Only a title with a NUL (half the bad records) needs the model, as it would
                // read from a response.
                #expect(kept > 9 * inTheModel, "\(kept) kept as JSON, \(inTheModel) read into the model")
            }
        }
        let bad = FakeFeed(settings: FakeSettings(seed: 5, zones: 1, recordsPerZone: 2_000, badRecordEvery: 2, churn: false))
        let titles = try bad.entriesWithJSONFields(zone: 0, range: 0..<2_000).compactMap { entry -> Record? in
            guard case .record(let record) = entry, case .values = record.storedFields else { return nil }
            return record
        }
        #expect(!titles.isEmpty && titles.allSatisfy { $0.fields["title"] == .string("bad\u{0}title") })
    }

    /// With field sets, every note of a zone has the fields of one of them, and its own name;
    /// folders and tags draw theirs; another zone's sets are its own (its notes' references name
    /// its records).
    @Test func notesTakeTheirFieldsFromTheZonesSetsAndKeepTheirOwnNames() throws {
        let feed = FakeFeed(settings: FakeSettings(seed: 9, zones: 2, recordsPerZone: 3_000, pageSize: 200, churn: false, fieldSets: 3))
        var notes: [[String]] = []
        for zone in 0..<2 {
            let entries = try feed.entriesWithJSONFields(zone: zone, range: 0..<3_000)
            var names = Set<String>()
            var noteFields = Set<String>()
            var folderFields = Set<String>()
            for case .record(let record) in entries {
                names.insert(record.recordName)
                let fields = JSONValue.object(record.fields.mapValues(\.json)).jsonText
                if record.recordType == "Note" { noteFields.insert(fields) }
                if record.recordType == "Folder" { folderFields.insert(fields) }
            }
            #expect(names.count == 3_000, "every record its own name (zone \(zone))")
            // A set's folder is a record of its own zone's first page.
            let firstPage = Set((0..<feed.creates).map { feed.recordName(zone: zone, page: 0, slot: $0) })
            var folders = 0
            for case .record(let record) in entries where record.recordType == "Note" {
                guard case .reference(let folder)? = record.fields["folder"] else { continue }
                folders += 1
                #expect(firstPage.contains(folder.recordName) && folder.zoneID == feed.zoneID(zone), "\(folder) in zone \(zone)")
            }
            #expect(folders > 0)
            #expect(noteFields.count == 3, "three sets of note fields in zone \(zone): \(noteFields.count)")
            #expect(folderFields.count > 100, "folders draw their own fields (zone \(zone)): \(folderFields.count)")
            notes.append(noteFields.sorted())
        }
        #expect(notes[0] != notes[1])
    }

    /// A program may set any number: fewer than one set is one, more than the files allow is as
    /// many as they do, so that the sets' memory stays bounded and the plan says what is drawn.
    @Test func fieldSetsOutsideTheRangeAreHeldToIt() throws {
        for (given, held) in [(-3, 1), (0, 1), (Int.max, FakeSettings.fieldSetsRange.upperBound), (37, 37)] {
            var settings = FakeSettings(seed: 4, zones: 1, recordsPerZone: 400, churn: false, fieldSets: given)
            #expect(settings.fieldSets == held && FakeFeed(settings: settings).fieldSetCount == held, "fieldSets \(given)")
            settings.fieldSets = nil
            settings.fieldSets = given
            #expect(settings.fieldSets == held, "fieldSets \(given), set after")
        }
        let one = FakeFeed(settings: FakeSettings(seed: 4, zones: 1, recordsPerZone: 400, churn: false, fieldSets: 0))
        var notes = Set<String>()
        for case .record(let record) in try one.entriesWithJSONFields(zone: 0, range: 0..<400) where record.recordType == "Note" {
            notes.insert(JSONValue.object(record.fields.mapValues(\.json)).jsonText)
        }
        #expect(notes.count == 1, "\(notes.count) sets of note fields from one")
    }

    /// The in-process source writes its values straight into its pages: each field's object must
    /// be, byte for byte, what `JSONWriter` writes for the model's value, as the fake server writes
    /// its pages (a number's form included: jsonb keeps a double's `5.0` apart from `5`). Objects
    /// (locations, assets) are left out: the model holds their members in a dictionary.
    @Test func eachFieldIsWrittenAsTheServersPagesWriteIt() throws {
        let feed = FakeFeed(settings: FakeSettings(seed: 7, zones: 1, recordsPerZone: 2_000, pageSize: 200, churn: true))
        var compared = 0
        for start in stride(from: 0, to: 2_000, by: 200) {
            let range = start..<start + 200
            for (model, json) in zip(feed.entries(zone: 0, range: range), try feed.entriesWithJSONFields(zone: 0, range: range)) {
                guard case .record(let expected) = model, case .record(let record) = json, case .json(let raw) = record.storedFields else { continue }
                let page = raw.page.buffer
                for field in raw.fields {
                    let name = String(decoding: page[Int(field.name.lowerBound)..<Int(field.name.upperBound)], as: UTF8.self)
                    let value = try #require(expected.fields[name], "\(name) is one of the model's fields")
                    if value.typeTag.hasPrefix("LOCATION") || value.typeTag.hasPrefix("ASSET") { continue }
                    var writer = JSONWriter()
                    writer.sortsKeys = false
                    writer.write(field: value)
                    let written = Array(page[Int(field.objectStart)..<Int(field.objectEnd)])
                    if written != writer.bytes {
                        let server = String(decoding: writer.bytes, as: UTF8.self)
                        Issue.record("\(name): \(String(decoding: written, as: UTF8.self)) where the server writes \(server)")
                        return
                    }
                    compared += 1
                }
                withExtendedLifetime(raw.page) {}
            }
        }
        #expect(compared > 15_000, "\(compared) fields compared")
    }

    /// The in-process source notes each field as it writes it rather than reading its page
    /// again: what it notes must be what the check of a response's fields finds, field by field
    /// (where each name, object, type and value is, whether a string has an escape, whether an
    /// object would come out of the model as it came), and a record it leaves to the check must
    /// be one the check would not keep either: one with a NUL in a text, or in its zone's owner.
    @Test func whatTheSourceNotesOfItsFieldsIsWhatTheCheckOfAResponseFinds() throws {
        var nulOwner = FakeSettings(seed: 11, zones: 1, recordsPerZone: 1_000, badRecordEvery: 9, churn: false)
        nulOwner.owner = "_fake\u{0}Owner"
        var nulOwnerSets = nulOwner
        nulOwnerSets.fieldSets = 40
        // With field sets, a note takes its set's object whole, a page of its own noted from its
        // first byte (one set holds a body of about 30 KB, past the room its writer first took);
        // a set with a folder in a zone of the owner's with a NUL is copied into the note's page
        // and left to the check, as a note that drew it would be.
        let settings = [
            FakeSettings(seed: 11, zones: 1, recordsPerZone: 4_000, badRecordEvery: 9, churn: true),
            FakeSettings(seed: 11, zones: 1, recordsPerZone: 4_000, badRecordEvery: 9, churn: false),
            nulOwner,
            FakeSettings(seed: 11, zones: 1, recordsPerZone: 4_000, badRecordEvery: 9, churn: true, fieldSets: 40),
            nulOwnerSets,
        ]
        for settings in settings {
            let feed = FakeFeed(settings: settings)
            var noted = 0
            var objectsKept = 0
            var escaped = 0
            var leftToTheCheck = 0
            var pagesGrown = 0
            var lentChecked = 0
            var lentGrown = 0
            for start in stride(from: 0, to: settings.recordsPerZone, by: 200) {
                var (_, _, fields) = feed.entriesWritingFields(zone: 0, range: start..<start + 200)
                let page = fields.finish()
                // Past the room first reserved, so that offsets after the writer moved on to
                // another are compared too.
                if page.buffer.count > 200 * 1_536 { pagesGrown += 1 }
                for object in fields.objects {
                    if let lent = object.lent {
                        // A set's object, lent whole: the check of its own page finds its notes.
                        let checked = try RecordFields.read(from: lent.page, at: [lent.range.lowerBound])
                        guard case .json(let found)? = checked.first else {
                            Issue.record("a set's object was lent, but the check does not keep it")
                            continue
                        }
                        let (notes, foundFields) = withExtendedLifetime(lent.page) { (Array(lent.fields), Array(found.fields)) }
                        #expect(found.range == lent.range && foundFields == notes, "a set's object lent with notes the check does not find")
                        lentChecked += 1
                        if lent.range.count > 1_536 { lentGrown += 1 }
                        objectsKept += notes.filter { $0.objectKeptUpTo >= 0 }.count
                        escaped += notes.filter(\.stringEscaped).count
                        continue
                    }
                    let checked = try RecordFields.read(from: page, at: [object.start])
                    guard let known = object.known else {
                        guard case .values(let values)? = checked.first else {
                            Issue.record("the record at \(object.start) was left to the check, which keeps it")
                            continue
                        }
                        let owner = values.values.contains { value in
                            if case .reference(let reference) = value { reference.zoneID?.ownerRecordName.containsNUL ?? false } else { false }
                        }
                        #expect(owner || values.values.contains { $0.containsNUL }, "the record at \(object.start) was left to the check")
                        leftToTheCheck += 1
                        continue
                    }
                    guard case .json(let found)? = checked.first else {
                        Issue.record("the record at \(object.start) was noted, but the check does not keep it")
                        continue
                    }
                    let notes = Array(fields.noted[known.fields])
                    let foundFields = withExtendedLifetime(page) { Array(found.fields) }
                    #expect(found.range == object.start..<known.end)
                    #expect(foundFields.count == notes.count, "the record at \(object.start)")
                    if let i = notes.indices.first(where: { i in i < foundFields.count && foundFields[i] != notes[i] }) {
                        Issue.record("the record at \(object.start), field \(i): noted \(notes[i]), found \(foundFields[i])")
                    }
                    noted += 1
                    objectsKept += notes.filter { $0.objectKeptUpTo >= 0 }.count
                    escaped += notes.filter(\.stringEscaped).count
                }
            }
            let counts =
                "\(noted) noted, \(lentChecked) sets lent (\(lentGrown) grown), \(leftToTheCheck) left to the check, \(objectsKept) objects kept, \(escaped) escaped, \(pagesGrown) pages grown"
            if settings.owner.containsNUL {
                // Every note with a folder refers to it in the owner's zone.
                #expect(noted > 0 && leftToTheCheck > noted, "\(counts)")
            } else if settings.fieldSets != nil {
                // As without sets, every kind the notes can hold was met and only the bad titles
                // were left; most notes took a set whole, one of them a set that outgrew its room.
                #expect(
                    lentChecked + noted > 9 * leftToTheCheck && lentChecked > 2_000 && lentGrown > 0 && leftToTheCheck > 0 && objectsKept > 1_000
                        && escaped > 100, "\(counts)")
            } else {
                // Every kind the notes can hold was met, and only the bad titles were left.
                #expect(noted > 9 * leftToTheCheck && leftToTheCheck > 0 && objectsKept > 1_000 && escaped > 100 && pagesGrown > 0, "\(counts)")
            }
        }
    }

    /// Names, change tags and download links are spelt in hexadecimal a word at a time: each
    /// digit of every position must be the one `String(_:radix:)` writes.
    @Test func hexadecimalIsSpeltAsSwiftSpellsIt() {
        func padded(_ value: UInt64, _ digits: Int, uppercase: Bool = false) -> String {
            let text = String(value, radix: 16, uppercase: uppercase)
            return String(repeating: "0", count: digits - text.count) + text
        }
        var random = SystemRandomNumberGenerator()
        var values: [UInt64] = [0, .max, 0x0123_4567_89AB_CDEF, 0xFEDC_BA98_7654_3210, 0x0A0A_0A0A_9F9F_9F9F]
        for _ in 0..<10_000 { values.append(random.next()) }
        for (a, b) in zip(values, values.reversed()) {
            let (high, low) = (padded(a, 16, uppercase: true), padded(b, 16, uppercase: true))
            let uuid = [high.prefix(8), high.dropFirst(8).prefix(4), high.suffix(4), low.prefix(4), low.suffix(12)].joined(separator: "-")
            #expect(Hex.uuid(a, b) == uuid)
            #expect(Hex.short(a) == padded(a & 0xFFFF_FFFF, 8))
            if Hex.uuid(a, b) != uuid || Hex.short(a) != padded(a & 0xFFFF_FFFF, 8) { return }
        }
    }

    @Test func recordNameKeysAreEqualExactlyWhenTheNamesAre() {
        let name = FakeFeed(settings: FakeSettings()).recordName(zone: 0, page: 0, slot: 0)
        guard case .uuid = RecordNameKey(name) else {
            Issue.record("a generated name is kept as its bits")
            return
        }
        #expect(RecordNameKey(name) == RecordNameKey(String(decoding: Array(name.utf8), as: UTF8.self)))
        #expect(RecordNameKey(name.lowercased()) == .text(ExactName(name.lowercased())), "another spelling is another name")
        #expect(RecordNameKey(name.replacingOccurrences(of: "-", with: "_")) == .text(ExactName(name.replacingOccurrences(of: "-", with: "_"))))
        #expect(RecordNameKey("added-1") == .text("added-1"))
        #expect(RecordNameKey("caf\u{E9}") != RecordNameKey("cafe\u{301}"), "two names to CloudKit, though one String to Swift")
    }

    @Test func aTokenResumesTheFeedWhereItStopped() async throws {
        let source = FakeSource(settings: FakeSettings(zones: 1, recordsPerZone: 2_000))
        let zone = ZoneID(zoneName: "Zone01", ownerRecordName: "_fakeOwner")
        let all = try await pages(source, zone: "Zone01")
        let resumed = try await source.fetchZoneChanges(in: zone, since: all[3].syncToken)
        #expect(resumed.entries == all[4].entries)
    }

    @Test func aTokenFromAnotherFeedIsRejectedAsExpired() async throws {
        let source = FakeSource(settings: FakeSettings(zones: 1))
        await #expect(throws: SyncError.self) {
            _ = try await source.fetchZoneChanges(in: ZoneID(zoneName: "Zone01", ownerRecordName: "_fakeOwner"), since: ChangeToken("nonsense"))
        }
    }

    func pages(_ source: FakeSource, zone: String) async throws -> [ZoneChangePage] {
        var out: [ZoneChangePage] = []
        var token: ChangeToken?
        repeat {
            let page = try await source.fetchZoneChanges(in: ZoneID(zoneName: zone, ownerRecordName: "_fakeOwner"), since: token)
            out.append(page)
            token = page.syncToken
        } while out.last!.moreComing
        return out
    }
}

extension ZoneChangePage: Equatable {
    public static func == (a: ZoneChangePage, b: ZoneChangePage) -> Bool {
        a.entries == b.entries && a.syncToken == b.syncToken && a.moreComing == b.moreComing
    }
}

@Suite struct FieldValueDecodingTests {
    @Test func negativeZeroAndInt64ExtremesSurviveTheWireForm() throws {
        let json =
            #"{"a":{"type":"DOUBLE","value":-0.0},"b":{"type":"INT64","value":-9223372036854775808},"c":{"type":"DOUBLE_LIST","value":[-0.0,1]},"d":{"type":"INT64","value":"9007199254740993"}}"#
        let fields = try JSONDecoder().decode([String: FieldValue].self, from: Data(json.utf8))
        guard case .double(let a) = fields["a"] else {
            Issue.record("not a double")
            return
        }
        #expect(a == 0 && a.sign == .minus)
        #expect(fields["b"] == .int64(.min))
        #expect(fields["d"] == .int64(9_007_199_254_740_993), "numbersAsStrings form")
        guard case .list(_, let items) = fields["c"], case .double(let first) = items.first else {
            Issue.record("not a list")
            return
        }
        #expect(first.sign == .minus)
    }
}
