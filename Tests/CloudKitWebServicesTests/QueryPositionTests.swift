import Testing
import ZoneFeed

@testable import ZoneFeedCloudKit

/// A zone read by query keeps its place as a token: slices of modification time, and a
/// watermark per record type.
@Suite struct QueryPositionTests {
    @Test func aBackfillsRangeIsSplitIntoContiguousSlicesAndOneOpenSliceAfterTheSettledTime() {
        let slices = QueryZoneReader.split(from: 1_000, settledBefore: 161_000, into: 16)
        #expect(slices.count == 16)
        #expect(slices.first?.from == 1_000)
        #expect(slices.last == QuerySlice(from: 161_000, to: nil), "the present is read by one open slice")
        for (a, b) in zip(slices, slices.dropFirst()) {
            #expect(a.to == b.from, "no gap and no overlap between \(a) and \(b)")
        }
        // Nothing settled yet, or one slice wanted: one open slice from the start.
        #expect(QueryZoneReader.split(from: 5_000, settledBefore: 4_000, into: 16) == [QuerySlice(from: 5_000, to: nil)])
        #expect(QueryZoneReader.split(from: 0, settledBefore: 9_000, into: 1) == [QuerySlice(from: 0, to: nil)])
        // A range narrower than the slices asked for makes fewer, still contiguous.
        let narrow = QueryZoneReader.split(from: 0, settledBefore: 3, into: 16)
        #expect(narrow.map(\.from) == [0, 1, 2, 3])
    }

    @Test func aPositionGoesThroughItsTokenWhole() throws {
        var position = QueryPosition()
        position.types["Score"] = .init(
            watermark: .init(ms: 1_700_000_000_123, name: "S-1"), earliestMs: 1_600_000_000_000,
            slices: [QuerySlice(from: 10, to: 20, marker: "m"), QuerySlice(from: 20, to: nil)])
        position.sweep = ["Score": [QuerySlice(from: 0, to: nil)]]
        position.lastSweepAt = 1_764_000_000
        position.runsSinceSweep = 3
        let token = position.token
        #expect(token.value.hasPrefix("q1:"))
        #expect(try QueryPosition.decode(token) == position)
        #expect(try QueryPosition.decode(nil) == nil)
    }

    @Test func aTokenThatIsNoQueryPositionIsTakenAsExpired() {
        for value in ["AQID-a-change-feed-token", "q1:{not json", "q1:[1,2]"] {
            #expect(throws: SyncError.self) { try QueryPosition.decode(ChangeToken(value)) }
            let code = (try? QueryPosition.decode(ChangeToken(value))).map { _ in "decoded" }
            #expect(code == nil)
        }
        do {
            _ = try QueryPosition.decode(ChangeToken("q1:{not json"))
        } catch let error as SyncError {
            #expect(error.code == .changeTokenExpired, "the zone is read again from the beginning")
        } catch {
            Issue.record("\(error)")
        }
    }

    /// A server's (or a checkpoint's) extreme times cannot make a sum or difference overflow.
    @Test func extremeTimesAreClampedSoThatNothingOverflows() throws {
        let hostile = ChangeToken(
            #"q1:{"types":{"T":{"watermark":{"ms":-9223372036854775808,"name":"x"},"earliestMs":9223372036854775807,"#
                + #""slices":[{"from":-9223372036854775808,"to":9223372036854775807}]}},"runsSinceSweep":0,"sweepStarting":false}"#)
        let position = try #require(try QueryPosition.decode(hostile))
        let state = try #require(position.types["T"])
        #expect(state.watermark?.ms == 0)
        #expect(state.earliestMs == QueryZoneReader.timeRange.upperBound)
        let slice = try #require(state.slices?.first)
        #expect(slice.from == 0 && slice.to == QueryZoneReader.timeRange.upperBound)
        #expect(slice.canSplit)
        #expect(QueryZoneReader.split(from: slice.from, settledBefore: slice.to!, into: 16).count == 16)
        #expect(QueryZoneReader.clamped(.min) == 0 && QueryZoneReader.clamped(.max) == QueryZoneReader.timeRange.upperBound)
    }
}
