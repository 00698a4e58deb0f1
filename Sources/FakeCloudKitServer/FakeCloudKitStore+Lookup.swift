import CloudKitModel
import FakeCloudKit

/// `records/lookup`: records by their names, in the order asked, each as it is now. A lookup
/// reads the records themselves, not a query index: a record is found whatever its index lag
/// (`indexLag`), and one that is not there (never made, or deleted) is a `NOT_FOUND` error
/// entry of its own. At most 200 names a request, as CloudKit's other operations take.
extension FakeCloudKitStore {
    struct LookupBody: Decodable {
        var records: [Name]?
        var zoneID: ZoneIDBody?
        var desiredKeys: [String]?

        struct Name: Decodable {
            var recordName: String?
        }
    }

    func recordsLookup(database: String, body: [UInt8]) -> Reply {
        guard let request = decode(LookupBody.self, from: body, emptyAs: nil), let asked = request.records else {
            return .badRequest("records/lookup: the body is not a JSON object with records")
        }
        guard (1...200).contains(asked.count) else { return .badRequest("records/lookup takes 1 to 200 records, not \(asked.count)") }
        var names: [String] = []
        for name in asked {
            guard let recordName = name.recordName, !recordName.isEmpty else { return .badRequest("records/lookup needs each record's recordName") }
            names.append(recordName)
        }
        let zone: Zone
        switch requestedZone(request.zoneID, database: database) {
        case .success(let found): zone = found
        case .failure(let refusal): return refusal.reply
        }
        traffic.lookedUp += names.count
        // Every live record, whatever the index has seen of it: a walk over the zone's entries
        // each request, which lookups, rare, can afford.
        var live: [RecordNameKey: QueryItem] = [:]
        for item in queryItems(database: database, zone: zone, visibleBy: .max) { live[item.name] = item }
        let found = names.compactMap { live[RecordNameKey($0)] }
        var records: [RecordNameKey: Record] = [:]
        for record in self.records(for: found[...], in: zone) { records[RecordNameKey(record.recordName)] = record }

        var writer = JSONWriter(capacity: 64 * 1024)
        writer.sortsKeys = false
        writer.literal("{\"records\":[")
        let desiredKeys = request.desiredKeys.map(Set.init)
        for (i, name) in names.enumerated() {
            if i > 0 { writer.literal(",") }
            if let record = records[RecordNameKey(name)] {
                writer.write(record: record, zoneID: zone.id, desiredKeys: desiredKeys)
            } else {
                writer.write(
                    entry: .error(RecordError(recordName: name, reason: "record not found", serverErrorCode: "NOT_FOUND")), zoneID: zone.id,
                    desiredKeys: nil)
            }
        }
        writer.literal("]}")
        return Reply(body: writer.bytes)
    }
}
