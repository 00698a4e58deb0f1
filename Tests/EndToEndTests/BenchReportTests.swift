import Testing

@testable import ZoneFeedBench

/// A rate is records over a measured time; a time the clock measured as next to nothing makes a
/// rate no Int holds, which the report writes as "?" and null rather than trapping on.
@Suite struct BenchReportTests {
    @Test func aRateIsAWholeNumberWhenAnIntHoldsIt() {
        #expect(BenchReport.whole(123_456.5) == 123_457)
        #expect(BenchReport.grouped(1_234_567.2) == "1,234,567")
        #expect(BenchReport.jsonWhole(42.4) == .int(42))
    }

    @Test(arguments: [Double.infinity, -Double.infinity, Double.nan, 1e300, -1e300, 9.3e18])
    func aRateNoIntHoldsIsShownAsUnknown(rate: Double) {
        #expect(BenchReport.whole(rate) == nil)
        #expect(BenchReport.grouped(rate) == "?")
        #expect(BenchReport.jsonWhole(rate) == .null)
    }
}
