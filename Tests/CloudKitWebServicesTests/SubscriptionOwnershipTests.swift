import CloudKitModel
import CloudKitWebServices
import Foundation
import Testing

@testable import ZoneFeedCloudKit

/// Which of the subscriptions `subscriptions/list` answers are a pipeline's own, to keep or to
/// delete as stale: those `follow` names, and not another pipeline's whose name begins with this
/// one's and a dot, whose IDs begin with this one's prefix too.
struct SubscriptionOwnershipTests {
    /// As the service answers a list: each subscription as it was made.
    static let listed = #"""
        {"subscriptions": [
          {"subscriptionID": "zonefeed.notes.Zone01", "subscriptionType": "zone", "zoneID": {"zoneName": "Zone01"}},
          {"subscriptionID": "zonefeed.notes._defaultZone.Tag", "subscriptionType": "query", "query": {"recordType": "Tag"},
           "firesOn": ["create", "update", "delete"]},
          {"subscriptionID": "zonefeed.notes.archive.Zone01", "subscriptionType": "zone", "zoneID": {"zoneName": "Zone01"}},
          {"subscriptionID": "zonefeed.notes.archive._defaultZone.Tag", "subscriptionType": "query", "query": {"recordType": "Tag"}},
          {"subscriptionID": "zonefeed.notes._defaultZone.Old", "subscriptionType": "zone", "zoneID": {"zoneName": "Old"}},
          {"subscriptionID": "zonefeed.notes.Gone", "subscriptionType": "zone", "zoneID": {"zoneName": "Gone"}},
          {"subscriptionID": "zonefeed.notes.NoZone", "subscriptionType": "zone"},
          {"subscriptionID": "someone-else", "subscriptionType": "zone", "zoneID": {"zoneName": "Zone01"}}
        ]}
        """#

    struct Listed: Decodable { var subscriptions: [Subscription] }

    @Test func aPipelineOwnsWhatItNamesAndNotWhatALongerNamedPipelineMade() throws {
        let subscriptions = try JSONDecoder().decode(Listed.self, from: Data(Self.listed.utf8)).subscriptions
        #expect(subscriptions[1].recordType == "Tag", "a query subscription's record type is read from the list")
        let ours = subscriptions.filter { CloudKitSource.isOurs($0, prefix: "zonefeed.notes.") }.compactMap(\.subscriptionID)
        // A stale zone's (Gone) is ours, to delete; `notes.archive`'s are not, nor a zone
        // subscription whose ID reads like a query's, nor one that names no zone.
        #expect(ours == ["zonefeed.notes.Zone01", "zonefeed.notes._defaultZone.Tag", "zonefeed.notes.Gone"])
        let theirs = subscriptions.filter { CloudKitSource.isOurs($0, prefix: "zonefeed.notes.archive.") }.compactMap(\.subscriptionID)
        #expect(theirs == ["zonefeed.notes.archive.Zone01", "zonefeed.notes.archive._defaultZone.Tag"])
    }

    /// A deletion's notification names the record in `rid`: a name far longer than any record's
    /// is not kept (the sweep finds the deletion), where a courier's megabyte answer held a
    /// megabyte of memory a name, up to 100,000 of them.
    @Test func aNotifiedDeletionIsTakenWithANameOfARecordsLengthOnly() throws {
        func notification(_ rid: String) throws -> JSONValue {
            try Array(#"{"ck":{"qry":{"fo":3,"sid":"zonefeed.notes._defaultZone.Tag","rid":"\#(rid)"}}}"#.utf8).withUnsafeBytes { try JSONValue(parsing: $0) }
        }
        let prefix = "zonefeed.notes."
        #expect(CloudKitSource.deletedRecord(in: try notification("R-1"), subscriptionPrefix: prefix) == "R-1")
        let longest = String(repeating: "r", count: CloudKitSource.maxNotifiedNameBytes)
        #expect(CloudKitSource.deletedRecord(in: try notification(longest), subscriptionPrefix: prefix) == longest)
        #expect(CloudKitSource.deletedRecord(in: try notification(longest + "r"), subscriptionPrefix: prefix) == nil)
        #expect(CloudKitSource.deletedRecord(in: try notification("R-1"), subscriptionPrefix: "zonefeed.other.") == nil)
    }
}
