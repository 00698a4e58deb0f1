import CloudKitSchema
import Foundation
import ZoneFeedPostgres

/// A `.ckdb` file's text, parsed as `recordTypes: { schemaFile }` and `zonefeed schema` parse it,
/// then mapped to tables and columns as they map it: a syntax error is the answer to a bad file;
/// a trap, a hang or a huge allocation is a finding, and so are names PostgreSQL would refuse or
/// cut (`IdentifierNames` promises names that fit and never collide).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSchemaFile(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    // `CloudKitSchema(contentsOfFile:)` refuses a file that is not UTF-8 before parsing.
    guard let text = String(bytes: UnsafeBufferPointer(start: start, count: count), encoding: .utf8),
        let schema = try? CloudKitSchema(parsing: text)
    else { return 0 }
    for options in [SchemaFileMapping(), SchemaFileMapping(stripCoreDataPrefix: true, indexes: .queryable)] {
        checkNames(options.mappings(from: schema))
    }
    return 0
}

private func checkNames(_ mappings: [PostgresRecordTypeMapping]) {
    let system = Set(systemColumns)
    var tables: Set<String> = []
    for mapping in mappings {
        guard tables.insert(mapping.table.lowercased()).inserted, mapping.table.utf8.count <= 63 else {
            fatalError("table \(mapping.table.debugDescription) of \(mapping.recordType.debugDescription) is too long or taken")
        }
        var columns: Set<String> = []
        for field in mapping.fields {
            let folded = field.column.lowercased()
            guard columns.insert(folded).inserted, !system.contains(folded), field.column.utf8.count <= 63 else {
                fatalError("column \(field.column.debugDescription) of field \(field.field.debugDescription) is too long, reserved or taken")
            }
        }
    }
}
