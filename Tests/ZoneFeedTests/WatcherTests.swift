import CloudKitModel
import Logging
import TestSupport
import Testing
import ZoneFeed

/// The watcher's timing on a manual clock, with a notifier the test drives and cycles that only
/// record why they ran: no process, database or network, and minutes of the watcher's time in
/// milliseconds. Each step waits until the watcher is asleep on the clock (or has handled a hint)
/// before the test moves the time on.
@Suite(.timeLimit(.minutes(1))) struct WatcherTests {
    static let configuration = Watcher.Configuration(pollInterval: .seconds(300), debounce: .milliseconds(250), pushRetryInterval: .seconds(30))
    static let poll = configuration.pollInterval
    static let debounce = configuration.debounce
    static let retry = configuration.pushRetryInterval
    /// Where the watcher and the test's steps run: a thread of their own, so that the rest of
    /// the suite cannot hold them up (`DedicatedExecutor`).
    static let executor = DedicatedExecutor(label: "zonefeed.tests.watcher")

    /// A cycle as the watcher started it: why, and when on the manual clock.
    struct Cycle: Equatable, CustomStringConvertible {
        var trigger: Watcher.Trigger
        var at: Duration

        init(_ trigger: Watcher.Trigger, at: Duration) {
            self.trigger = trigger
            self.at = at
        }

        var description: String { "\(trigger.rawValue) at \(at)" }
    }

    /// A watcher on a manual clock, and what it has done so far.
    struct Watching {
        let watcher: Watcher
        let clock: ManualClock
        let health: WatchHealth
        let cycles: Observed<[Cycle]>
        let logs: Observed<[String]>

        /// Returns once `count` cycles have begun.
        func began(_ count: Int, sourceLocation: SourceLocation = #_sourceLocation) async throws {
            let met = await cycles.wait { $0.count >= count }
            try #require(met, "\(count) cycles began, not \(cycles.current)", sourceLocation: sourceLocation)
        }

        /// Returns once the health has taken in `count` cycles: it does just after a cycle ends,
        /// and is an actor with nothing to wait on.
        func healthTook(_ count: Int, sourceLocation: SourceLocation = #_sourceLocation) async throws {
            try await WatcherTests.until("the health took in \(count) cycles", sourceLocation: sourceLocation) { await health.cycles >= count }
        }

        /// Once the watcher listens and waits for its poll, a change is notified (at time zero);
        /// returns when the watcher waits out its debounce.
        func notified(by notifier: ScriptedNotifier, sourceLocation: SourceLocation = #_sourceLocation) async throws {
            try await notifier.listening(sourceLocation: sourceLocation)
            try await clock.sleepers(wakingAt: WatcherTests.poll, sourceLocation: sourceLocation)
            notifier.send(.change)
            try await notifier.handled(sourceLocation: sourceLocation)
            try await clock.sleepers(wakingAt: WatcherTests.debounce, WatcherTests.poll, sourceLocation: sourceLocation)
        }

        /// The log lines that contain `text`.
        func logged(_ text: String) -> [String] { logs.current.filter { $0.contains(text) } }
    }

    /// Looks every millisecond until `condition` holds, for what can only be looked at, not
    /// waited on; fails the test when it has not within 30 s. It sleeps between looks rather than
    /// yielding: a loop of `Task.yield()` keeps a thread of the cooperative pool busy, and with two
    /// cores the rest of the suite starves.
    static func until(
        _ what: String, sourceLocation: SourceLocation = #_sourceLocation, _ condition: () async -> Bool
    ) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(30)
        while await !condition() {
            try #require(clock.now < deadline, "\(what), within 30 s", sourceLocation: sourceLocation)
            try await Task.sleep(for: .milliseconds(1))
        }
    }

    /// A watcher with `notifier` on a manual clock; `outcome` ends each cycle, given its number
    /// (0: the catch-up), with a status or an error (the run could not start). All succeed unless
    /// told otherwise.
    static func watcher(
        _ notifier: ScriptedNotifier?, pageMemory: PageMemory = PageMemory(mostKept: 16 << 20),
        outcome: @escaping @Sendable (Int) async throws -> RunStatus = { _ in .succeeded },
        records: @escaping @Sendable (Int) -> Int = { _ in 0 }
    ) -> Watching {
        let clock = ManualClock()
        let cycles = Observed<[Cycle]>([])
        let logs = Observed<[String]>([])
        let health = WatchHealth(clock: clock)
        let watcher = Watcher(
            configuration: configuration, notifier: notifier, health: health, logger: Logger(label: "watcher") { _ in LogLines(lines: logs) },
            clock: clock, pageMemory: pageMemory
        ) { trigger in
            let number = cycles.update { cycles in
                cycles.append(Cycle(trigger, at: clock.now.offset))
                return cycles.count - 1
            }
            var summary = RunSummary(runID: Int64(number + 1), pipeline: "test", status: try await outcome(number))
            if summary.status == .failed { summary.error = "cycle \(number) failed (scripted)" }
            summary.totals.upserts = records(number)
            return summary
        }
        return Watching(watcher: watcher, clock: clock, health: health, cycles: cycles, logs: logs)
    }

    /// Runs a watcher for as long as `body` takes, then cancels it and waits for its end. Its
    /// pages' memory is a pool of its own unless the test gives one (`pageMemory`).
    func watching(
        _ notifier: ScriptedNotifier?, pageMemory: PageMemory = PageMemory(mostKept: 16 << 20),
        outcome: @escaping @Sendable (Int) async throws -> RunStatus = { _ in .succeeded },
        records: @escaping @Sendable (Int) -> Int = { _ in 0 }, _ body: (Watching) async throws -> Void
    ) async throws {
        let watching = Self.watcher(notifier, pageMemory: pageMemory, outcome: outcome, records: records)
        try await withTaskExecutorPreference(Self.executor) {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await watching.watcher.run() }
                defer { group.cancelAll() }
                try await body(watching)
            }
        }
    }

    @Test func theCatchUpCycleRunsFirstAndAloneAndThePollIsTimedFromItsEnd() async throws {
        let notifier = ScriptedNotifier()
        let caughtUp = Observed(false)
        try await watching(
            notifier,
            outcome: { number in
                if number == 0 { _ = await caughtUp.wait { $0 } }
                return .succeeded
            }
        ) { w in
            try await w.began(1)
            #expect(w.cycles.current == [Cycle(.catchUp, at: .zero)])
            // The catch-up takes ten seconds of the clock's time.
            w.clock.advance(by: .seconds(10))
            #expect(notifier.state.current.follows == 0 && notifier.state.current.listens == 0, "nobody listens before the catch-up is over")
            #expect(w.clock.deadlines.isEmpty, "no poll is timed before the catch-up is over")
            caughtUp.update { $0 = true }

            try await notifier.listening()
            try await w.clock.sleepers(wakingAt: .seconds(10) + Self.poll)
            #expect(notifier.state.current.follows == 1, "subscribed once")
            #expect(w.cycles.current == [Cycle(.catchUp, at: .zero)])
        }
    }

    /// A safety poll that finds changes no notification announced, while push works, hints at
    /// a subscription gone (deleted by hand or by CloudKit): the subscriptions are made again,
    /// where they were only when zones came or went, and the zone was polled only for ever.
    @Test func aSafetyPollThatFindsUnannouncedChangesMakesTheSubscriptionsAgain() async throws {
        let notifier = ScriptedNotifier()
        // Every cycle after the catch-up finds changes; only a poll's are unannounced.
        try await watching(notifier, records: { $0 == 0 ? 0 : 5 }) { w in
            try await w.healthTook(1)
            try await notifier.listening()
            notifier.send(.confirmed)
            try await notifier.handled()
            #expect(await w.health.push == .on)
            let before = notifier.state.current.follows
            #expect(before >= 1)
            try await w.clock.sleepers(wakingAt: Self.poll)
            w.clock.advance(by: Self.poll)
            let noticed = await w.logs.wait(until: { $0.contains { $0.contains("the safety poll found changes no notification had announced") } })
            #expect(noticed, "\(w.logs.current)")
            let followedAgain = await notifier.state.wait(until: { $0.follows == before + 1 })
            #expect(followedAgain, "made again after the poll that found changes: \(notifier.state.current.follows) after \(before)")
        }
    }

    @Test func aBurstOfNotificationsWithinTheDebounceIsOneCycleAtItsEnd() async throws {
        let notifier = ScriptedNotifier()
        try await watching(notifier) { w in
            try await w.notified(by: notifier)
            // Two more within the debounce, taken in by the watcher before it ends; they do not
            // put it off.
            w.clock.advance(by: .milliseconds(100))
            notifier.send(.change)
            notifier.send(.listening)
            try await notifier.handled()
            #expect(w.clock.deadlines == [Self.debounce, Self.poll])
            w.clock.advance(by: Self.debounce - .milliseconds(100))
            try await w.began(2)
            #expect(w.cycles.current == [Cycle(.catchUp, at: .zero), Cycle(.notification, at: Self.debounce)])

            // That cycle took the whole burst: the next one is the poll's.
            w.clock.advance(by: Self.poll - Self.debounce)
            // Until the poll's cycle begins, or another debounce shows that one more cycle for the
            // burst comes first (begun a debounce before the poll, or waiting a debounce after it).
            try await Self.until("the poll's cycle began, or another debounce") {
                w.cycles.current.count > 2 || w.clock.deadlines.contains(Self.poll + Self.debounce)
            }
            #expect(w.cycles.current == [Cycle(.catchUp, at: .zero), Cycle(.notification, at: Self.debounce), Cycle(.poll, at: Self.poll)])
        }
    }

    @Test func aNotificationAfterACycleStartsAnotherADebounceLater() async throws {
        let notifier = ScriptedNotifier()
        try await watching(notifier) { w in
            try await w.notified(by: notifier)
            w.clock.advance(by: Self.debounce)
            try await w.began(2)

            // A second later.
            w.clock.advance(by: .seconds(1))
            notifier.send(.change)
            try await notifier.handled()
            let later = Self.debounce + .seconds(1) + Self.debounce
            try await w.clock.sleepers(wakingAt: later, Self.poll)
            w.clock.advance(by: Self.debounce)
            try await w.began(3)

            // Nothing else was pending: the next cycle is the poll's.
            try await w.clock.sleepers(wakingAt: Self.poll)
            w.clock.advance(by: Self.poll - later)
            try await w.began(4)
            #expect(
                w.cycles.current == [
                    Cycle(.catchUp, at: .zero), Cycle(.notification, at: Self.debounce), Cycle(.notification, at: later), Cycle(.poll, at: Self.poll),
                ])
        }
    }

    @Test func theSafetyPollRunsEveryPollIntervalWhateverTheNotificationsSay() async throws {
        let notifier = ScriptedNotifier()
        try await watching(notifier) { w in
            try await notifier.listening()
            try await w.clock.sleepers(wakingAt: Self.poll)

            // A notification's cycle does not put the poll off.
            w.clock.advance(by: .seconds(100))
            notifier.send(.change)
            try await notifier.handled()
            try await w.clock.sleepers(wakingAt: .seconds(100) + Self.debounce, Self.poll)
            w.clock.advance(by: Self.debounce)
            try await w.began(2)

            // Not a millisecond early.
            w.clock.advance(by: Self.poll - .seconds(100) - Self.debounce - .milliseconds(1))
            #expect(w.clock.deadlines == [Self.poll], "the poll still waits")
            #expect(w.cycles.current.count == 2)
            w.clock.advance(by: .milliseconds(1))
            try await w.began(3)

            // And again a poll interval later.
            try await w.clock.sleepers(wakingAt: Self.poll * 2)
            w.clock.advance(by: Self.poll)
            try await w.began(4)
            #expect(
                w.cycles.current == [
                    Cycle(.catchUp, at: .zero), Cycle(.notification, at: .seconds(100) + Self.debounce), Cycle(.poll, at: Self.poll),
                    Cycle(.poll, at: Self.poll * 2),
                ])
        }
    }

    /// How push fails: the subscriptions cannot be made, or the hints stop with an error.
    enum PushFailure: CaseIterable { case follow, hints }

    @Test(arguments: PushFailure.allCases)
    func unavailablePushIsSaidOnceAndTriedAgainLessAndLessOftenWhileThePollGoesOn(failure: PushFailure) async throws {
        let notifier = ScriptedNotifier(unavailable: failure == .follow)
        let limit = Self.configuration.pushRetryLimit
        try await watching(notifier) { w in
            /// The attempt that follows `listens` earlier ones fails; the watcher sleeps.
            func attemptFails(after listens: Int) async throws {
                guard failure == .hints else { return }
                try await notifier.listening(listens + 1)
                notifier.failHints()
            }
            try await attemptFails(after: 0)
            try await w.clock.sleepers(wakingAt: Self.retry, Self.poll)
            #expect(await w.health.push == .off)
            #expect(w.logged("change notifications are unavailable; polling every 300 s until they are back").count == 1)

            // Not a millisecond early.
            w.clock.advance(by: Self.retry - .milliseconds(1))
            #expect(w.clock.deadlines == [Self.retry, Self.poll])
            #expect(notifier.state.current.follows == 1)
            w.clock.advance(by: .milliseconds(1))

            // Each wait twice the one before, up to the limit, and the polls all the same: the
            // clock moved on to whichever comes first.
            var attempts: [Duration] = [.zero, Self.retry]
            var wait = Self.retry * 2
            var (nextAttempt, nextPoll) = (Self.retry + wait, Self.poll)
            /// The clock moves on to the poll due next, which runs its cycle.
            func pollRuns() async throws {
                let cycles = w.cycles.current.count
                w.clock.advance(by: nextPoll - w.clock.now.offset)
                try await w.began(cycles + 1)
                nextPoll += Self.poll
            }
            try await attemptFails(after: 1)
            while attempts.count < 8 {
                try await w.clock.sleepers(wakingAt: nextAttempt, nextPoll)
                if nextPoll < nextAttempt {
                    try await pollRuns()
                } else {
                    let listens = notifier.state.current.listens
                    w.clock.advance(by: nextAttempt - w.clock.now.offset)
                    try await attemptFails(after: listens)
                    attempts.append(nextAttempt)
                    wait = min(wait * 2, limit)
                    nextAttempt += wait
                }
            }
            try await w.clock.sleepers(wakingAt: nextAttempt, nextPoll)
            #expect(attempts == [0, 30, 90, 210, 450, 930, 1_830, 2_730].map { Duration.seconds($0) })
            #expect(notifier.state.current.follows == 8)
            #expect(w.cycles.current.map(\.trigger) == [.catchUp] + Array(repeating: .poll, count: 9), "a poll every 300 s to 2,700")
            #expect(w.logged("change notifications are unavailable").count == 1, "said once: \(w.logs.current)")
            #expect(await w.health.push == .off)

            // Back at the next attempt, once the courier answers: the polls before it run first.
            notifier.state.update { $0.unavailable = false }
            while nextPoll < nextAttempt {
                try await pollRuns()
                try await w.clock.sleepers(wakingAt: nextAttempt, nextPoll)
            }
            let listens = notifier.state.current.listens
            w.clock.advance(by: nextAttempt - w.clock.now.offset)
            try await notifier.listening(listens + 1)
            notifier.send(.confirmed)
            try await notifier.handled()
            #expect(await w.health.push == .on)
            #expect(w.logged("change notifications are back").count == 1)
            try await w.clock.sleepers(wakingAt: nextPoll)

            // Push that worked and fails again is tried again after the first interval.
            notifier.failHints()
            try await w.clock.sleepers(wakingAt: nextAttempt + Self.retry, nextPoll)
            #expect(await w.health.push == .off)
        }
    }

    /// A cycle's pages keep their memory for the next page (`PageMemory`); after the cycle the
    /// watcher waits, often for minutes, so what they kept is freed as the cycle ends, whether it
    /// succeeded or could not start.
    @Test func whatACyclesPagesKeptIsFreedWhenTheCycleEnds() async throws {
        let memory = PageMemory(mostKept: 4 << 20)
        let keptAtTheEndOfACycle = Observed<[Int]>([])
        let couldNotStart = ScriptedFailure(description: "the database is down (scripted)")
        try await watching(
            nil, pageMemory: memory,
            outcome: { number in
                // Two pages of about the same size: the second is written into the first's memory,
                // which is kept again when it is freed.
                let first = memory.take(atLeast: 330_000)
                memory.giveBack(first)
                let second = memory.take(atLeast: 320_000)
                #expect(second.baseAddress == first.baseAddress)
                memory.giveBack(second)
                keptAtTheEndOfACycle.update { $0.append(memory.keptBytes) }
                if number == 1 { throw couldNotStart }
                return .succeeded
            }
        ) { w in
            try await w.healthTook(1)
            #expect(memory.keptBytes == 0, "the catch-up's pages' memory is freed")
            try await w.clock.sleepers(wakingAt: Self.poll)
            w.clock.advance(by: Self.poll)
            try await w.healthTook(2)
            #expect(await w.health.lastError == "\(couldNotStart)")
            #expect(memory.keptBytes == 0, "and that of a cycle that could not start")
        }
        #expect(keptAtTheEndOfACycle.current == [393_216, 393_216], "kept until each cycle ended: 330,000 bytes rounded up to 64 KiB")
    }

    @Test func healthTurnsUnhealthyAfterFailingForUnhealthyAfterAndHealthyAgainOnASuccess() async throws {
        let unhealthyAfter = Duration.seconds(600)
        let caughtUp = Observed(false)
        let couldNotStart = ScriptedFailure(description: "the database is down (scripted)")
        try await watching(
            nil,
            outcome: { number in
                switch number {
                case 0:
                    _ = await caughtUp.wait { $0 }
                    return .succeeded
                case 1, 3: return .failed
                case 2: throw couldNotStart
                default: return .succeeded
                }
            }
        ) { w in
            try await w.began(1)
            #expect(await !w.health.isHealthy(failingFor: unhealthyAfter), "not while catching up")
            caughtUp.update { $0 = true }
            try await w.healthTook(1)
            #expect(await w.health.isHealthy(failingFor: unhealthyAfter))
            #expect(await w.health.push == .off, "no notifier: polling alone")

            // Failing since the poll at 300 s: a failed run, then one that could not start.
            try await w.clock.sleepers(wakingAt: Self.poll)
            w.clock.advance(by: Self.poll)
            try await w.healthTook(2)
            #expect(await w.health.isHealthy(failingFor: unhealthyAfter))
            #expect(await w.health.lastError == "cycle 1 failed (scripted)")
            try await w.clock.sleepers(wakingAt: Self.poll * 2)
            w.clock.advance(by: Self.poll)
            try await w.healthTook(3)
            #expect(await w.health.isHealthy(failingFor: unhealthyAfter))
            #expect(await w.health.lastError == "\(couldNotStart)")

            // Unhealthy once failing for `unhealthyAfter`, not a millisecond before.
            try await w.clock.sleepers(wakingAt: Self.poll * 3)
            w.clock.advance(by: Self.poll - .milliseconds(1))
            #expect(await w.health.isHealthy(failingFor: unhealthyAfter))
            w.clock.advance(by: .milliseconds(1))
            #expect(await !w.health.isHealthy(failingFor: unhealthyAfter))
            try await w.healthTook(4)
            #expect(await !w.health.isHealthy(failingFor: unhealthyAfter))

            // The next success makes it healthy again.
            try await w.clock.sleepers(wakingAt: Self.poll * 4)
            w.clock.advance(by: Self.poll)
            try await w.healthTook(5)
            #expect(await w.health.isHealthy(failingFor: unhealthyAfter))
            #expect(await w.health.lastError == nil)
            #expect(w.cycles.current.map(\.trigger) == [.catchUp, .poll, .poll, .poll, .poll])
        }
    }

    /// A cycle that waits for ever (on a lock another session holds, on a server gone without a
    /// word) ends no cycle: /healthz said ok for as long as it waited. It is unhealthy once the
    /// cycle has shown no sign of life for `unhealthyAfter`, and never sooner than 15 minutes.
    @Test func healthTurnsUnhealthyWhenTheCycleRunningShowsNoProgressForUnhealthyAfter() async throws {
        let unhealthyAfter = Duration.seconds(600)
        let release = Observed(false)
        try await watching(
            nil,
            outcome: { number in
                if number == 1 { _ = await release.wait { $0 } }
                return .succeeded
            }
        ) { w in
            try await w.healthTook(1)
            try await w.clock.sleepers(wakingAt: Self.poll)
            w.clock.advance(by: Self.poll)
            try await w.began(2)
            // Quiet for just under 15 minutes: not stalled, even for a watch told 1 s (or the
            // default 600 s), as one page's throttled retries may take that long.
            let least = WatchHealth.leastStall
            #expect(least == .seconds(900))
            w.clock.advance(by: least - .seconds(1))
            #expect(await w.health.cycleStalled(for: .seconds(1)) == nil)
            #expect(await w.health.isHealthy(failingFor: .seconds(1)))
            #expect(await w.health.isHealthy(failingFor: unhealthyAfter))
            w.clock.advance(by: .seconds(1))
            #expect(await w.health.cycleStalled(for: .seconds(1)) == least)
            #expect(await !w.health.isHealthy(failingFor: .seconds(1)))
            #expect(await !w.health.isHealthy(failingFor: unhealthyAfter))
            #expect(await w.health.isHealthy(failingFor: .seconds(3_600)), "not before the hour a watch was told")

            // A sign of life (a page, a batch) starts the count again.
            await w.health.cycleProgressed()
            w.clock.advance(by: .seconds(3_600) - .milliseconds(1))
            #expect(await w.health.isHealthy(failingFor: .seconds(3_600)))
            w.clock.advance(by: .milliseconds(1))
            #expect(await !w.health.isHealthy(failingFor: .seconds(3_600)))
            #expect(await w.health.cycleStalled(for: .seconds(3_600)) == .seconds(3_600))

            // The cycle ends: healthy again, and nothing is running to stall.
            release.update { $0 = true }
            try await w.healthTook(2)
            #expect(await w.health.isHealthy(failingFor: unhealthyAfter))
            #expect(await w.health.cycleStalled(for: unhealthyAfter) == nil)
        }
    }

    /// Where the watcher is when it is cancelled.
    enum Moment: CaseIterable { case waiting, inACycle }

    @Test(arguments: Moment.allCases)
    func cancellationEndsTheRunWithoutWaitingForTheClock(moment: Moment) async throws {
        let notifier = ScriptedNotifier()
        // The poll's cycle goes on until cancelled, as a long run does until it stops between
        // batches.
        let (endless, continuation) = AsyncStream.makeStream(of: Void.self)
        let w = Self.watcher(notifier) { number in
            guard number == 1 else { return .succeeded }
            for await _ in endless {}
            withExtendedLifetime(continuation) {}
            return .interrupted
        }
        let ended = Observed(false)
        let run = Task(executorPreference: Self.executor) {
            await w.watcher.run()
            ended.update { $0 = true }
        }
        try await withTaskExecutorPreference(Self.executor) {
            try await notifier.listening()
            try await w.clock.sleepers(wakingAt: Self.poll)
            if moment == .inACycle {
                w.clock.advance(by: Self.poll)
                try await w.began(2)
            }
            run.cancel()
            // Only the test moves the manual clock, and it stands still now: nothing but the
            // cancellation can end the run.
            #expect(await ended.wait(until: { $0 }), "run() ended after the cancellation")
        }
        #expect(w.clock.deadlines.isEmpty, "nothing sleeps on")
        #expect(w.cycles.current.count == (moment == .inACycle ? 2 : 1), "no cycle after the cancellation: \(w.cycles.current)")
        #expect(w.logged("watch cycle failed").isEmpty, "a stop is not a failure")
    }

    /// Keeps the log lines for the test to read.
    struct LogLines: LogHandler {
        let lines: Observed<[String]>
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) { lines.update { $0.append("\(event.level) \(event.message)") } }
    }
}

/// A cycle that could not start, as the test scripts it.
private struct ScriptedFailure: Error, CustomStringConvertible {
    let description: String
}
