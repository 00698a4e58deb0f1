import CloudKitModel
import Foundation

/// A scenario file (`zonefeed fake-server --scenario FILE`): the data the server starts with,
/// instead of the generator's. It is JSON (the records are CloudKit's own JSON, so a capture of
/// real responses can be pasted in):
///
/// ```json
/// {
///   "userRecordName": "_alice",
///   "zones": [
///     {
///       "zoneName": "Notes",
///       "ownerRecordName": "_fakeOwner",
///       "database": "private",
///       "records": [
///         {"recordName": "n1", "recordType": "Note",
///          "fields": {"title": {"value": "Hello", "type": "STRING"}},
///          "created": {"timestamp": 1700000000000, "userRecordName": "_alice"}},
///         {"recordName": "n1", "recordType": "Note", "fields": {"title": {"value": "Hello again", "type": "STRING"}}},
///         {"recordName": "n0", "deleted": true}
///       ]
///     }
///   ]
/// }
/// ```
///
/// Every key but `zones[].zoneName` is optional: `ownerRecordName` defaults to the fake
/// settings' owner (`_fakeOwner`), `database` to `private`, `userRecordName` to the server's
/// configuration. `records` is the zone's history in order: a record (a later entry with the same
/// name is an update), a deletion `{recordName, deleted: true}`, or a per-record error
/// `{recordName, serverErrorCode, reason}`. Records without `recordChangeTag`, `created` or
/// `modified` get them from the server. Tokens carry a fingerprint of the file, so a token from a
/// server started with another file is refused as expired.
struct Scenario: Decodable {
    struct Zone: Decodable {
        var zoneName: String
        var ownerRecordName: String?
        var database: String?
        var records: [RecordEntry]?
    }

    var userRecordName: String?
    var zones: [Zone]
    var fingerprint: UInt64 = 0

    enum CodingKeys: String, CodingKey { case userRecordName, zones }

    struct Error: Swift.Error, CustomStringConvertible {
        var path: String
        var message: String
        var description: String { "\(path): \(message)" }
    }

    /// The largest scenario file read: many thousands of records, far from what a server's
    /// memory can be asked to hold by mistake.
    static let maxBytes = 256 << 20

    static func load(path: String) throws -> Scenario {
        // Read up to the cap and one byte more, whatever the path is (a FIFO, /dev/zero).
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw Error(path: path, message: "cannot read the scenario file: it does not exist or cannot be opened")
        }
        defer { try? handle.close() }
        let data: Data
        do {
            data = try handle.read(upToCount: Self.maxBytes + 1) ?? Data()
        } catch {
            throw Error(path: path, message: "cannot read the scenario file (\(error.localizedDescription))")
        }
        guard data.count <= Self.maxBytes else {
            throw Error(path: path, message: "the scenario file is larger than \(Self.maxBytes >> 20) MiB, the most one may be")
        }
        var scenario: Scenario
        do {
            scenario = try JSONDecoder().decode(Scenario.self, from: data)
        } catch let DecodingError.dataCorrupted(context) {
            throw Error(path: path, message: "not valid JSON: \(context.debugDescription)")
        } catch let DecodingError.keyNotFound(key, context) {
            throw Error(path: path, message: "missing key '\(key.stringValue)' at \(Self.describe(context.codingPath))")
        } catch let DecodingError.typeMismatch(_, context) {
            throw Error(path: path, message: "unexpected value at \(Self.describe(context.codingPath)): \(context.debugDescription)")
        } catch {
            throw Error(path: path, message: "not a scenario: \(error)")
        }
        scenario.fingerprint = Fingerprint.of(Array(data))
        return scenario
    }

    static func describe(_ path: [any CodingKey]) -> String {
        path.isEmpty ? "the top level" : path.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined()
    }
}
