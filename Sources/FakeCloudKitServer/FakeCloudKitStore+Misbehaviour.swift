import CloudKitModel

/// Feeds that never get anywhere, and bodies changed on their way out: the misbehaviours of a
/// broken or hostile server (or a proxy in between) that zonefeed must survive, set by the admin
/// endpoints `faults/stall`, `faults/rewrite`, `faults/pad`, `faults/trickle`, `faults/hold` and `faults/cut`.
extension FakeCloudKitStore {
    /// How a stalled zone's `records/changes` (or the database's `changes/database`) answers,
    /// always with `moreComing: true`.
    enum Stall: String, Sendable, CaseIterable {
        /// Its real page, with the token it was asked from.
        case sameToken
        /// No records (or zones), and a new token (of the same place) each time.
        case emptyPages
        /// The first page it answered while stalled, again and again, each with a new token.
        case repeatPage
    }

    struct StalledZone: Sendable {
        var mode: Stall
        var repeated: JSONValue?
        var answers = 0
    }

    /// The key of a stalled database feed in `stalls` (`faults/stall` with `feed: database`),
    /// which no zone's name can be: zone names hold no NUL here.
    static let databaseFeed = "\u{0}changes/database"

    /// A stalled feed's answer in place of the real one (a zone's `records/changes`, or the
    /// database's `changes/database`); any other answer as it is.
    func stalled(_ reply: Reply, operation: String, request body: [UInt8]) -> Reply {
        guard !stalls.isEmpty, reply.status == 200 else { return reply }
        let key: String
        let member: String
        let askedToken: String?
        if operation == "changes/database" {
            // An empty body asks from the start, as `{}` does.
            let request = decode(DatabaseChangesBody.self, from: body, emptyAs: nil)
            (key, member, askedToken) = (Self.databaseFeed, "zones", request?.syncToken)
        } else {
            guard let request = decode(RecordsChangesBody.self, from: body, emptyAs: nil), let zoneName = request.zoneID?.zoneName else {
                return reply
            }
            (key, member, askedToken) = (zoneName, "records", request.syncToken)
        }
        guard var stall = stalls[key], case .object(var page)? = Self.json(reply.body) else { return reply }
        stall.answers += 1
        // A token of the place the feed stays at, told apart from the others by a nonce.
        let asked = askedToken.flatMap(SyncToken.init(encoded:))
        var here = asked ?? page["syncToken"].flatMap { if case .string(let t) = $0 { SyncToken(encoded: t) } else { nil } }
        here?.nonce = stall.answers
        switch stall.mode {
        case .sameToken:
            if let askedToken { page["syncToken"] = .string(askedToken) }
        case .emptyPages:
            page[member] = .array([])
            if let here { page["syncToken"] = .string(here.encoded) }
        case .repeatPage:
            if stall.repeated == nil { stall.repeated = page[member] }
            page[member] = stall.repeated ?? .array([])
            if let here { page["syncToken"] = .string(here.encoded) }
        }
        page["moreComing"] = .bool(true)
        stalls[key] = stall
        var changed = reply
        var writer = JSONWriter()
        writer.write(.object(page))
        changed.body = writer.bytes
        return changed
    }

    static func json(_ bytes: [UInt8]) -> JSONValue? {
        bytes.withUnsafeBufferPointer { buffer in
            var reader = JSONReader(buffer)
            return try? reader.readValue()
        }
    }

    /// `body` with every `find` replaced by `replace`.
    static func replacing(_ find: [UInt8], with replace: [UInt8], in body: [UInt8]) -> [UInt8] {
        guard !find.isEmpty, body.count >= find.count else { return body }
        var out: [UInt8] = []
        out.reserveCapacity(body.count)
        var i = 0
        while i < body.count {
            if i + find.count <= body.count, body[i] == find[0], body[i..<i + find.count].elementsEqual(find) {
                out += replace
                i += find.count
            } else {
                out.append(body[i])
                i += 1
            }
        }
        return out
    }
}
