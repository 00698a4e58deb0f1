import ArgumentParser
import Foundation
import ZoneFeed

struct ResetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reset",
        abstract: "Make the next run resync zones from a nil token, tombstoning what the source no longer has.")

    @OptionGroup var options: PipelineOptions

    @Option(name: .customLong("zone"), help: "A zone to resync (repeatable).")
    var zones: [String] = []

    @Flag(help: "Resync every zone, and rediscover zones.")
    var all = false

    func validate() throws {
        if zones.isEmpty == !all {
            throw ValidationError("give either --zone NAME (one or more) or --all")
        }
    }

    func run() async throws {
        let pipeline = try options.loadPipeline()
        let logger = options.makeLogger()
        let outcome = try await options.askingDestination(pipeline, logger: logger) { destination in
            try await destination.reset(zoneNames: zones, all: all, addingUnknownZones: pipeline.source.namedZones != nil)
        }
        for zone in outcome.reset {
            printLine("zone \(InertText.escaped(zone.zoneName)): will resync from the beginning on the next run")
        }
        if all && outcome.reset.isEmpty { printLine("no zones have checkpoints yet; the next run starts from the beginning anyway") }
        if !outcome.unknown.isEmpty {
            FileHandle.standardError.write(
                Data("no checkpoint for zone(s) \(InertText.escaped(outcome.unknown.joined(separator: ", "))): nothing to reset (see zonefeed status)\n".utf8))
            throw Exit.usage
        }
        if !outcome.busy.isEmpty {
            FileHandle.standardError.write(
                Data(
                    "zone(s) \(InertText.escaped(outcome.busy.map(\.zoneName).joined(separator: ", "))) are being applied by a run right now; reset them again when it ends\n"
                        .utf8
                ))
            throw Exit.failed
        }
    }
}
