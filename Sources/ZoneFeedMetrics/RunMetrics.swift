import CoreMetrics
import Foundation
import ZoneFeed

/// A run's metrics, through swift-metrics: the engine's events become counters as they happen
/// (so a long-running process could serve them live), and `finish` records how the run ended.
/// Every series of the catalog exists from the start, at zero, so a dashboard tells "none" from
/// "not reported".
public final class RunMetrics: Sendable {
    private let records: [String: Counter]
    private let pages = Counter(label: ZoneFeedMetric.pages.name)
    private let resyncs = Counter(label: ZoneFeedMetric.resyncs.name)
    private let zones: [String: Counter]
    private let started = Date()
    private let zonesClaimed = Gauge(label: ZoneFeedMetric.zonesClaimed.name)

    static let recordOutcomes = ["upserted", "tombstoned", "rejected", "skipped", "swept"]
    static let zoneOutcomes = ["applied", "up_to_date", "claimed_elsewhere", "failed", "deleted"]
    /// A run that never started (a refused pipeline, an unreachable database) is `refused`.
    static let statuses = ["succeeded", "failed", "interrupted", "refused"]

    public init() {
        records = Dictionary(
            uniqueKeysWithValues: Self.recordOutcomes.map { ($0, Counter(label: ZoneFeedMetric.records.name, dimensions: [("outcome", $0)])) })
        zones = Dictionary(uniqueKeysWithValues: Self.zoneOutcomes.map { ($0, Counter(label: ZoneFeedMetric.zones.name, dimensions: [("outcome", $0)])) })
        // The CloudKit client's series that exist in every output, at zero when nothing was
        // retried or throttled (the client makes them as requests happen).
        Counter(label: ZoneFeedMetric.cloudKitRetries.name).increment(by: 0)
        Counter(label: ZoneFeedMetric.misdirectedRetries.name).increment(by: 0)
        FloatingPointCounter(label: ZoneFeedMetric.throttleWait.name).increment(by: 0)
        zonesClaimed.record(0)
    }

    /// Counts what an event says was applied.
    public func record(_ event: SyncEvent) {
        switch event {
        case .fetchedRecordZoneChanges(_, let batch, _):
            add(batch)
        case .zoneDeleted(_, let outcome):
            add(outcome)
            zones["deleted"]?.increment()
        case .appliedDatabaseChanges(let outcome):
            add(outcome)
        case .resyncStarted:
            resyncs.increment()
        case .zoneClaimedElsewhere:
            zones["claimed_elsewhere"]?.increment()
        case .didFetchChanges(let summary):
            zones["applied"]?.increment(by: summary.zonesApplied.count)
            zones["up_to_date"]?.increment(by: summary.zonesUpToDate.count)
            zones["failed"]?.increment(by: summary.zonesFailed.count)
            zonesClaimed.record(summary.zonesClaimed)
        case .willFetchChanges, .fetchedDatabaseChanges, .willFetchRecordZoneChanges, .didFetchRecordZoneChanges, .stateUpdate, .fetchedZonePage:
            break
        }
    }

    private func add(_ outcome: BatchOutcome) {
        pages.increment(by: outcome.pages)
        records["upserted"]?.increment(by: outcome.upserts)
        records["tombstoned"]?.increment(by: outcome.tombstones)
        records["rejected"]?.increment(by: outcome.rejects)
        records["skipped"]?.increment(by: outcome.skipped)
        records["swept"]?.increment(by: outcome.swept)
    }

    /// The process's peak resident memory so far, in bytes (`getrusage`).
    static func peakResidentBytes() -> Int64 {
        var usage = rusage()
        #if canImport(Darwin)
            guard getrusage(RUSAGE_SELF, &usage) == 0 else { return 0 }
            return Int64(usage.ru_maxrss)  // bytes on macOS
        #else
            guard getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage) == 0 else { return 0 }
            // > getrusage(2): "ru_maxrss … (in kilobytes)"; a kernel's count, multiplied without
            // the trap an overflow would be.
            let (bytes, overflow) = Int64(usage.ru_maxrss).multipliedReportingOverflow(by: 1024)
            return overflow ? .max : bytes
        #endif
    }

    /// Records how the run ended: its status (nil: it never started), exit code, run ID and how
    /// long it took (as `zonefeed_runs` and the summary say; since this object was made when the
    /// run never started).
    /// The last-success timestamp is set only by a success: a backend that keeps metrics across
    /// runs (a Pushgateway, the metrics file) then still shows the previous success.
    public func finish(status: RunStatus?, exitCode: Int32, runID: Int64?, seconds: Double?) {
        let now = Date()
        let name = status?.rawValue ?? "refused"
        for candidate in Self.statuses {
            Gauge(label: ZoneFeedMetric.status.name, dimensions: [("status", candidate)]).record(candidate == name ? 1 : 0)
        }
        Gauge(label: ZoneFeedMetric.exitCode.name).record(Int64(exitCode))
        Gauge(label: ZoneFeedMetric.runID.name).record(runID ?? 0)
        Gauge(label: ZoneFeedMetric.duration.name).record(seconds ?? now.timeIntervalSince(started))
        Gauge(label: ZoneFeedMetric.finished.name).record(now.timeIntervalSince1970)
        Gauge(label: ZoneFeedMetric.peakMemory.name).record(Self.peakResidentBytes())
        if status == .succeeded {
            Gauge(label: ZoneFeedMetric.lastSuccess.name).record(now.timeIntervalSince1970)
        }
    }
}
