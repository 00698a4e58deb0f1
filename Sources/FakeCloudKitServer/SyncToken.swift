import CloudKitModel
import Foundation

/// What a fake server's sync token stands for. On the wire it is opaque: the standard base64 of
/// this value's JSON, so tokens carry `+`, `/` and `=` like real ones and a client that forgets to
/// URL-encode or JSON-escape them is caught.
///
/// - A **zone token** is a position in the zone's append-only history; with `offset` it is a
///   place inside the snapshot of the live records taken at that position (a nil-token fetch
///   pages through such a snapshot).
/// - A **database token** is a position in the database's zone-event log, with `offset` likewise
///   for the snapshot of the live zones that a nil-token `changes/database` pages through.
///
/// `epoch` ties a zone token to one incarnation of the zone and to the tokens not yet expired by
/// `/admin/zones/expire-tokens`; `feed` ties every token to the data the server was started with
/// (generator settings or scenario), so a token from a server started differently is refused.
struct SyncToken: Codable, Hashable, Sendable {
    enum Kind: String, Codable, Sendable { case zone, database }

    var version = 1
    var kind: Kind
    var feed: String
    var database: String
    var zoneName: String?
    var ownerRecordName: String?
    var epoch: Int
    var position: Int
    var offset: Int?
    /// Tells apart tokens of one place, as a stalled feed hands out (`faults/stall`).
    var nonce: Int?

    enum CodingKeys: String, CodingKey {
        case version = "v"
        case kind = "k"
        case feed = "f"
        case database = "d"
        case zoneName = "z"
        case ownerRecordName = "o"
        case epoch = "e"
        case position = "p"
        case offset = "s"
        case nonce = "n"
    }

    var encoded: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        // Encoding a struct of strings and integers cannot fail.
        let data = (try? encoder.encode(self)) ?? Data()
        return Base64.encode(Array(data))
    }

    /// The token, or nil when the text is not one of this server's tokens.
    init?(encoded text: String) {
        guard let bytes = Base64.decode(text), !bytes.isEmpty,
            let token = try? JSONDecoder().decode(SyncToken.self, from: Data(bytes)),
            token.version == 1, token.position >= 0, (token.offset ?? 0) >= 0
        else { return nil }
        self = token
    }

    init(kind: Kind, feed: String, database: String, zone: ZoneID? = nil, epoch: Int, position: Int, offset: Int? = nil) {
        self.kind = kind
        self.feed = feed
        self.database = database
        self.zoneName = zone?.zoneName
        self.ownerRecordName = zone?.ownerRecordName
        self.epoch = epoch
        self.position = position
        self.offset = offset
    }
}
