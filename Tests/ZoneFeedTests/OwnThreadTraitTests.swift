import TestSupport
import Testing

/// `.onItsOwnThread` moves each test case off the cooperative pool, onto a queue of its own.
@Suite(.onItsOwnThread) struct OwnThreadTraitTests {
    static func queueLabel() -> String { DedicatedExecutor.current ?? "the cooperative pool" }

    @Test(arguments: [1, 2]) func eachCaseRunsOnItsOwnQueueAndSoDoesWhatItAwaits(_ n: Int) async throws {
        #expect(Self.queueLabel().hasPrefix("zonefeed.tests."), "the body: \(Self.queueLabel())")
        // Not a wait for anything: a sleep is the suspension under test, resumed by a timer
        // off this thread, as the polls of the suites that use the trait are.
        try await Task.sleep(for: .milliseconds(10))
        #expect(Self.queueLabel().hasPrefix("zonefeed.tests."), "after a suspension: \(Self.queueLabel())")
        async let label = Self.queueLabel()
        let child = await label
        #expect(child.hasPrefix("zonefeed.tests."), "a child task (an unstructured Task does not inherit the preference): \(child)")
    }
}
