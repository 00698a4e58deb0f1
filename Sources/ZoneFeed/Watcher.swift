import CloudKitModel
import Logging

/// `zonefeed watch`: catches up with a run, then keeps the destination within seconds of the
/// source until cancelled. Every cycle is an ordinary incremental run (recorded in the run
/// history as any run is), started by
///
/// - a change hint from the source (`ChangeNotifying`), after `debounce`, which coalesces a
///   burst of notifications into one cycle;
/// - the safety poll, every `pollInterval` whatever the hints say: notifications may be lost,
///   delayed or coalesced, and a zone created since the last cycle has no subscription yet;
/// - without notifications (none offered, or they failed), the safety poll alone; push is tried
///   again after `pushRetryInterval`, then after twice as long each time it fails again, up to
///   `pushRetryLimit`, and after `pushRetryInterval` once more when it has worked.
///
/// Cancellation (a graceful shutdown) stops the current cycle between batches, as it stops a run.
public struct Watcher: Sendable {
    public struct Configuration: Sendable {
        public var pollInterval: Duration = .seconds(300)
        public var debounce: Duration = .milliseconds(250)
        public var pushRetryInterval: Duration = .seconds(30)
        /// The longest wait between two tries of push. Each try asks CloudKit for the zones and
        /// the subscriptions and makes a new push token (five, when the courier keeps failing):
        /// push that never works (a container without it, a courier a proxy blocks) cost that
        /// every 30 s for as long as the watch ran, where the safety poll keeps the data fresh.
        public var pushRetryLimit: Duration = .seconds(900)

        public init(
            pollInterval: Duration = .seconds(300), debounce: Duration = .milliseconds(250), pushRetryInterval: Duration = .seconds(30),
            pushRetryLimit: Duration = .seconds(900)
        ) {
            self.pollInterval = pollInterval
            self.debounce = debounce
            self.pushRetryInterval = pushRetryInterval
            self.pushRetryLimit = max(pushRetryLimit, pushRetryInterval)
        }
    }

    /// Why a cycle ran, for logs and tests.
    public enum Trigger: String, Sendable {
        case catchUp = "catch-up"
        case notification, poll
    }

    public let configuration: Configuration
    /// Runs one incremental run; returns its summary (failed runs included) or throws when the
    /// run could not start. The watcher goes on either way: the next trigger tries again.
    public let cycle: @Sendable (Trigger) async throws -> RunSummary
    public let notifier: (any ChangeNotifying)?
    public let health: WatchHealth
    public let logger: Logger
    /// What the poll, the debounce and the push retry sleep on: the continuous clock, or a test's
    /// manual clock, so that the watcher's timing can be tested without waiting for it. The
    /// health reads a clock of its own: give it the same.
    public let clock: any Clock<Duration>
    /// Where the cycles' pages keep their memory for the next page: emptied when a cycle ends, as
    /// the next may be minutes away (`pollInterval`), and memory kept that long is memory held
    /// for nothing. A test gives a pool of its own.
    public let pageMemory: PageMemory
    let followed = FollowedZones()

    public init(
        configuration: Configuration, notifier: (any ChangeNotifying)?, health: WatchHealth = WatchHealth(), logger: Logger,
        clock: any Clock<Duration> = ContinuousClock(), pageMemory: PageMemory = .shared,
        cycle: @escaping @Sendable (Trigger) async throws -> RunSummary
    ) {
        self.configuration = configuration
        self.notifier = notifier
        self.health = health
        self.logger = logger
        self.clock = clock
        self.pageMemory = pageMemory
        self.cycle = cycle
    }

    /// Runs until cancelled.
    public func run() async {
        if notifier == nil { await health.pushChanged(.off) }
        await runCycle(.catchUp)
        let (triggers, trigger) = AsyncStream.makeStream(of: Trigger.self, bufferingPolicy: .bufferingNewest(1))
        let notifications = HeardNotifications()
        await withDiscardingTaskGroup { group in
            group.addTask {
                while !Task.isCancelled {
                    do { try await clock.sleep(for: configuration.pollInterval) } catch { return }
                    trigger.yield(.poll)
                }
            }
            if let notifier {
                group.addTask { await listen(to: notifier, trigger: trigger, notifications: notifications) }
            }
            group.addTask {
                for await next in triggers {
                    if Task.isCancelled { break }
                    if next == .notification {
                        // Heard before the last cycle began, which took it: it stayed in the
                        // stream while that cycle's debounce let the burst settle.
                        guard await notifications.uncovered else { continue }
                        // Let the burst settle; what arrives meanwhile is taken by this cycle.
                        do { try await clock.sleep(for: configuration.debounce) } catch { break }
                    }
                    await notifications.cover()
                    await runCycle(next)
                }
            }
            // The three loops end when the watcher is cancelled (an AsyncStream's iteration ends
            // with its task's cancellation).
        }
    }

    func runCycle(_ trigger: Trigger) async {
        guard !Task.isCancelled else { return }
        await health.cycleBegan()
        do {
            let summary = try await cycle(trigger)
            releaseMemory()
            await health.cycleEnded(succeeded: summary.status == .succeeded, error: summary.error)
            var unannounced = false
            if trigger == .poll, summary.totals.records > 0, await health.push == .on {
                // What the safety net is for: say it caught something, as it hints at lost pushes.
                logger.notice(
                    "the safety poll found changes no notification had announced (lost or late)",
                    metadata: ["records": "\(summary.totals.records)", "zones": "\(summary.zonesApplied.map(\.zoneName).joined(separator: ","))"])
                unannounced = true
            }
            // Subscriptions follow the zones: asked again when a zone appeared that was not
            // followed yet or one went away, not after every cycle (two requests each time); and
            // when the safety poll found changes no notification announced, which a subscription
            // deleted since (by hand, by CloudKit) explains: it is made again.
            let zonesChanged = await followed.changed(applied: summary.zonesApplied, deleted: summary.zonesDeleted.map(\.zoneID))
            if let notifier, zonesChanged || unannounced {
                do {
                    try await notifier.follow(logger: logger)
                } catch {
                    await followed.forget()
                    logger.warning("could not update the subscriptions", metadata: ["error": "\(error)"])
                }
            }
        } catch {
            releaseMemory()
            await health.cycleEnded(succeeded: false, error: "\(error)")
            if !Task.isCancelled { logger.error("watch cycle failed", metadata: ["trigger": "\(trigger.rawValue)", "error": "\(error)"]) }
        }
    }

    /// Between cycles the watcher waits, often for minutes: the memory the cycle's pages kept
    /// for a next page, and what the cycle freed, go back to the system rather than staying
    /// resident all that time. The next cycle's first page meets fresh memory, once.
    func releaseMemory() {
        pageMemory.releaseKept()
        FreedMemory.release()
    }

    /// Subscribes, then turns every hint into a trigger; when push fails, says so once and tries
    /// again after `pushRetryInterval`, twice as long after each failure that follows, up to
    /// `pushRetryLimit`, while the safety poll carries on.
    func listen(to notifier: any ChangeNotifying, trigger: AsyncStream<Trigger>.Continuation, notifications: HeardNotifications) async {
        var saidUnavailable = false
        var retry = configuration.pushRetryInterval
        while !Task.isCancelled {
            do {
                try await notifier.follow(logger: logger)
                for try await hint in notifier.changeHints(logger: logger) {
                    switch hint.kind {
                    case .change, .listening:
                        await notifications.heard()
                        trigger.yield(.notification)
                    case .confirmed:
                        guard await health.push != .on else { continue }
                        await health.pushChanged(.on)
                        retry = configuration.pushRetryInterval
                        if saidUnavailable { logger.notice("change notifications are back") }
                        saidUnavailable = false
                    }
                }
                if Task.isCancelled { return }
                throw WatchError(.notificationsEnded, "the change notifications ended")
            } catch {
                if Task.isCancelled { return }
                await health.pushChanged(.off)
                if !saidUnavailable {
                    logger.warning(
                        "change notifications are unavailable; polling every \(configuration.pollInterval.secondsText) until they are back",
                        metadata: ["error": "\(error)"])
                    saidUnavailable = true
                }
                do { try await clock.sleep(for: retry) } catch { return }
                retry = min(retry * 2, configuration.pushRetryLimit)
            }
        }
    }
}

/// How many notifications the watcher has heard, and how many of them a cycle began after.
actor HeardNotifications {
    private var count = 0
    private var covered = 0

    func heard() { count += 1 }
    /// True when one was heard since the last cycle began.
    var uncovered: Bool { count > covered }
    /// A cycle begins: it fetches every change notified so far.
    func cover() { covered = count }
}

/// The zones the watcher's subscriptions were last made for.
actor FollowedZones {
    private var zones: Set<ZoneID> = []

    /// Takes a cycle's zones in; true when one is new or one went away.
    func changed(applied: [ZoneID], deleted: [ZoneID]) -> Bool {
        let before = zones
        zones.formUnion(applied)
        zones.subtract(deleted)
        return zones != before || !deleted.isEmpty
    }

    /// After a failed update, the next cycle tries again.
    func forget() { zones = [] }
}

/// What `/healthz` reports of a watcher.
public actor WatchHealth {
    /// Whether change notifications work: `starting` until the web courier first answers.
    public enum Push: String, Sendable { case starting, on, off }

    public private(set) var caughtUp = false
    public private(set) var push = Push.starting
    /// Since when cycles have been failing (nil while they succeed), as a time on `now`.
    private var failingSince: Duration?
    public private(set) var lastError: String?
    public private(set) var cycles = 0
    /// When the cycle running now last showed a sign of life (its start, any event of its run:
    /// a page of a zone's feed, a batch, a zone), as a time on `now`; nil between cycles.
    private var cycleLastProgressed: Duration?
    /// The time on the health's clock, counted from when the health was made: a clock's instants
    /// have a type of their own, which the actor would otherwise have to be generic over.
    private let now: @Sendable () -> Duration

    /// `clock`: the continuous clock, or a test's manual clock.
    public init<C: Clock>(clock: C = ContinuousClock()) where C.Duration == Duration {
        let start = clock.now
        now = { start.duration(to: clock.now) }
    }

    func cycleBegan() { cycleLastProgressed = now() }

    /// The cycle running now went on (any event of its run).
    public func cycleProgressed() {
        if cycleLastProgressed != nil { cycleLastProgressed = now() }
    }

    /// How long the cycle running now has shown no sign of life, once that is at least
    /// `threshold` and `leastStall`; nil otherwise.
    public func cycleStalled(for threshold: Duration) -> Duration? {
        guard let cycleLastProgressed else { return nil }
        let quiet = now() - cycleLastProgressed
        return quiet >= max(threshold, Self.leastStall) ? quiet : nil
    }

    /// The shortest quiet a cycle is taken as stalled after, whatever `unhealthyAfter` is: one
    /// page's request may wait out throttles for its whole retry budget (300 s by default) and
    /// its timeout, and a watch told 1 s must not turn unhealthy at every slow cycle (a liveness
    /// probe would restart it in a loop while CloudKit throttles it).
    public static let leastStall = Duration.seconds(900)

    func cycleEnded(succeeded: Bool, error: String?) {
        cycleLastProgressed = nil
        cycles += 1
        if succeeded {
            caughtUp = true
            failingSince = nil
            lastError = nil
        } else {
            if failingSince == nil { failingSince = now() }
            lastError = error
        }
    }

    func pushChanged(_ state: Push) { push = state }

    /// Ready once caught up; unhealthy when cycles have failed for longer than `threshold`, or
    /// the cycle running now has shown no sign of life for that long (`cycleStalled`): one
    /// waiting for ever on PostgreSQL (a lock held by another session, a server gone without a
    /// word) ends no cycle, failed or not, and was reported healthy for as long as it waited.
    public func isHealthy(failingFor threshold: Duration) -> Bool {
        guard caughtUp else { return false }
        if cycleStalled(for: threshold) != nil { return false }
        guard let failingSince else { return true }
        return now() - failingSince < threshold
    }
}

/// Why watching could not go on as it was; `description` is the sentence shown.
public struct WatchError: Error, CustomStringConvertible, Sendable {
    /// A struct rather than an enum, so that a new code breaks no caller's switch.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        public let description: String
        private init(_ description: String) { self.description = description }

        /// The stream of change notifications ended: the watch polls until they are back.
        public static let notificationsEnded = Code("notificationsEnded")
    }

    public var code: Code
    public var description: String

    public init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }
}
