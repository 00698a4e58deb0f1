import CloudKitModel
import Foundation
import ZoneFeed

/// The progress line on a terminal: per zone, records, pages and records per second. It listens
/// to the runner's events like everything else.
actor Progress {
    private let enabled: Bool
    private var zone: ZoneID?
    private var zoneStarted = ContinuousClock.now
    private var lastDraw = ContinuousClock.now - .seconds(1)

    init(enabled: Bool) { self.enabled = enabled }

    func handle(_ event: SyncEvent) {
        guard enabled else { return }
        switch event {
        case .willFetchRecordZoneChanges(let zone, let resyncing):
            self.zone = zone
            zoneStarted = .now
            Terminal.shared.showProgress("\(InertText.escaped(zone.zoneName)): fetching\(resyncing ? " (resync)" : "")…")
        case .fetchedRecordZoneChanges(let zone, _, let total):
            let now = ContinuousClock.now
            guard now - lastDraw > .milliseconds(200) else { return }
            lastDraw = now
            let seconds = max((now - zoneStarted).seconds, 0.001)
            // Bounded before the conversion, which would trap past Int.max.
            let rate = Int(min(Double(total.records) / seconds, 1e15))
            Terminal.shared.showProgress(
                "\(InertText.escaped(zone.zoneName)): \(total.records.grouped) records, \(total.pages.grouped) pages, \(rate.grouped) records/s"
            )
        case .didFetchRecordZoneChanges:
            Terminal.shared.endProgress()
        default:
            break
        }
    }
}
