import FakeCloudKit
import Foundation
import PageToRowsWorkload

// `page-to-rows straight|model RECORDS`: the work of that many records, for callgrind to count
// (`./run` subtracts a run of 0 records, which leaves the set-up out).
// `page-to-rows fake-source RECORDS`: the in-process fake source's work for that many records,
// pages of 200 written as CloudKit's JSON, each field noted as it is written (the few records
// the check of a response's fields would refuse checked): what a run on the
// fake source spends before the destination's work, which the in-process bench counts too.
// `page-to-rows in-process RECORDS`: the same, each page then written as the bench's COPY rows:
// a run on the fake source's work per record, without the engine and without PostgreSQL.
// With FIELD_SETS, notes take their fields from that many sets (`source.fake.fieldSets`, as the
// bench's in-process source does), every set made before the count starts.
let arguments = CommandLine.arguments
if arguments.count == 3 || arguments.count == 4, arguments[1] == "fake-source" || arguments[1] == "in-process", let count = Int(arguments[2]),
    count >= 0
{
    var fieldSets: Int?
    if arguments.count == 4 {
        guard let sets = Int(arguments[3]), FakeSettings.fieldSetsRange.contains(sets) else {
            print("FIELD_SETS must be a whole number from 1 to 4,096, not \(arguments[3])")
            exit(2)
        }
        fieldSets = sets
    }
    // Enough records that every set is drawn while they are made, before the count.
    let warm = fieldSets.map { $0 * 16 } ?? 0
    let feed = FakeFeed(settings: FakeSettings(seed: 42, zones: 1, recordsPerZone: max(1, count, warm), churn: false, fieldSets: fieldSets))
    for start in stride(from: 0, to: warm, by: PageToRows.recordsPerPage) {
        _ = try feed.entriesWithJSONFields(zone: 0, range: start..<min(warm, start + PageToRows.recordsPerPage))
    }
    var encoders = PageToRows.encoders()
    var made = 0
    var rows = 0
    for start in stride(from: 0, to: count, by: PageToRows.recordsPerPage) {
        let entries = try feed.entriesWithJSONFields(zone: 0, range: start..<min(count, start + PageToRows.recordsPerPage))
        made += entries.count
        if arguments[1] == "in-process" { rows += PageToRows.writeRows(of: entries, into: &encoders) }
    }
    print("\(made) entries from the fake source, \(rows) rows written")
    exit(0)
}
guard arguments.count == 3, let path = PageToRows.Path(rawValue: arguments[1]), let count = Int(arguments[2]), count >= 0 else {
    print("usage: page-to-rows straight|model RECORDS, or page-to-rows fake-source|in-process RECORDS [FIELD_SETS]")
    exit(2)
}
var workload = PageToRows(path: path)
for i in 0..<count { workload.record(i) }
print("\(workload.rowsWritten) rows from \(count) records, \(workload.bytesPerRecord) bytes of JSON a record")
