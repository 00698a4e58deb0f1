import Testing

@testable import ZoneFeedBench

/// The bench warms as much memory as a phase will write, but never more than half of what the
/// kernel says is available: a machine short of memory must not be pushed into its OOM killer.
@Suite struct MemoryWarmUpTests {
    @Test func theAvailableMemoryIsReadFromItsOwnLineInKilobytes() {
        let meminfo = """
            MemTotal:       24684112 kB
            MemFree:        17610240 kB
            MemAvailable:   22310912 kB
            Buffers:          124512 kB
            """
        #expect(MemoryWarmUp.availableBytes(meminfo: meminfo) == 22_310_912 * 1024)
    }

    @Test(arguments: [
        "MemTotal:       24684112 kB\nMemFree:        17610240 kB",  // a kernel before 3.14 has no such line
        "MemAvailable:   lots kB",
        "MemAvailable:   -5 kB",
        "MemAvailable:   99999999999999999999 kB",
        "MemAvailable:",
    ])
    func aLineThatIsMissingOrNotACountIsNotKnownAndWarmsNothing(meminfo: String) {
        let available = MemoryWarmUp.availableBytes(meminfo: meminfo)
        #expect(available == nil)
        #expect(MemoryWarmUp.bytesToWarm(wanted: 2_048_000_000, available: available) == 0)
    }

    @Test func aPhaseWarmsWhatItWillWriteButNeverMoreThanHalfWhatIsAvailable() {
        #expect(MemoryWarmUp.bytesToWarm(wanted: 2_048_000_000, available: 22_000_000_000) == 2_048_000_000)
        #expect(MemoryWarmUp.bytesToWarm(wanted: 2_048_000_000, available: 3_000_000_000) == 1_500_000_000)
        #expect(MemoryWarmUp.bytesToWarm(wanted: 2_048_000_000, available: 0) == 0)
        #expect(MemoryWarmUp.bytesToWarm(wanted: 0, available: 22_000_000_000) == 0)
    }

    @Test func aPhaseWarmsTwoKilobytesARowUpToFourGigabytes() {
        #expect(MemoryWarmUp.bytes(forRows: 1_000_000) == 2_048_000_000)
        #expect(MemoryWarmUp.bytes(forRows: 100_000_000) == MemoryWarmUp.bytes(forRows: 2_000_000))
        #expect(MemoryWarmUp.bytes(forRows: 0) == 0)
    }
}
