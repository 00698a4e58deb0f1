import Foundation
import PageToRowsWorkload

// `page-to-rows straight|model RECORDS`: the work of that many records, for callgrind to count
// (`./run` subtracts a run of 0 records, which leaves the set-up out).
let arguments = CommandLine.arguments
guard arguments.count == 3, let path = PageToRows.Path(rawValue: arguments[1]), let count = Int(arguments[2]), count >= 0 else {
    print("usage: page-to-rows straight|model RECORDS")
    exit(2)
}
var workload = PageToRows(path: path)
for i in 0..<count { workload.record(i) }
print("\(workload.rowsWritten) rows from \(count) records, \(workload.bytesPerRecord) bytes of JSON a record")
