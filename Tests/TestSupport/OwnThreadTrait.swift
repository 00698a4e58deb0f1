import Testing

/// Runs each test of a suite (each case of a parameterized one) on a `DedicatedExecutor`: for
/// tests that time what they watch (a kill at a random moment of a run, a poll with a deadline),
/// whose steps must not wait for a thread of the cooperative pool that other tests hold in libpq.
/// Not for tests that run a pipeline in process and prove its overlap: everything they start
/// would share the one thread. Nor for every suite: the pool's two threads also pace how many
/// blocking tests run at once, and with every end-to-end suite on its own threads the full suite
/// took 203 s instead of 145 and tests met their hang guards.
public struct OwnThreadTrait: TestTrait, SuiteTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        testCase == nil ? nil : self
    }

    public func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        try await withTaskExecutorPreference(DedicatedExecutor(label: "zonefeed.tests.\(test.name)")) { try await function() }
    }
}

extension Trait where Self == OwnThreadTrait {
    /// Each test on a thread of its own (`OwnThreadTrait`).
    public static var onItsOwnThread: Self { OwnThreadTrait() }
}
