import ArgumentParser
import Dispatch
import Foundation
import Logging
import Subprocess
import Synchronization
import ZoneFeed

struct PsqlCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "psql",
        abstract: "Open psql on the pipeline's database (starting the embedded server if the pipeline uses it).",
        discussion: "Arguments after the pipeline file go to psql, e.g. zonefeed psql pipelines/demo.yml -c 'SELECT 1'.")

    @OptionGroup var options: PipelineOptions

    @Argument(parsing: .captureForPassthrough, help: "Arguments for psql.")
    var psqlArguments: [String] = []

    func run() async throws {
        let pipeline = try options.loadPipeline()
        let logger = options.makeLogger()
        let arguments = psqlArguments
        let status = try await options.withDestination(pipeline, logger: logger) { destination -> Int32 in
            do {
                let status = try await destination.withShell(arguments: arguments) { shell in await Self.run(shell, logger: logger) }
                guard let status else {
                    logger.error("pipeline \(pipeline.name)'s destination has no interactive client")
                    return Exit.usage.rawValue
                }
                return status
            } catch {
                logger.error("\(error)")
                return 1
            }
        }
        if status != 0 { throw ExitCode(status) }
    }

    /// Runs the destination's client on this terminal and waits for it; its exit status.
    static func run(_ shell: DestinationShell, logger: Logger) async -> Int32 {
        // Ctrl-C belongs to the client (psql cancels the query at hand); zonefeed waits for it
        // rather than dying under it and leaving an embedded server running.
        let previous = signal(SIGINT, SIG_IGN)
        defer { signal(SIGINT, previous) }
        // A hang-up (the terminal closed) or a termination is passed on to the client, and
        // zonefeed goes on to clean up once it has ended: dying under it left the password
        // file behind, the embedded server running and psql orphaned. One that comes before the
        // client's PID is known is kept and sent once it is; none is sent after the client ended.
        let client = Mutex<(pid: Int32, pending: Int32?)>((0, nil))
        let forwarded = [SIGHUP, SIGTERM].map { number in
            // Ignored before the source is made, as libdispatch asks: the source sees it all the same.
            let before = signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                client.withLock { client in
                    if client.pid > 0 { kill(client.pid, number) } else if client.pid == 0 { client.pending = number }
                }
            }
            source.resume()
            return (number, before, source)
        }
        defer {
            client.withLock { $0.pid = -1 }
            for (number, before, source) in forwarded {
                source.cancel()
                signal(number, before)
            }
        }
        var environment: [Environment.Key: String?] = [:]
        for (name, value) in shell.environment {
            // updateValue keeps a nil, which removes the variable (a subscript would drop the entry).
            if let key = Environment.Key(rawValue: name) { environment.updateValue(value, forKey: key) }
        }
        do {
            let result = try await Subprocess.run(
                .name(shell.program), arguments: Arguments(shell.arguments), environment: .inherit.updating(environment),
                input: .currentStandardInput, output: .currentStandardOutput, error: .currentStandardError
            ) { execution in
                client.withLock { client in
                    client.pid = execution.processIdentifier.value
                    if let pending = client.pending { kill(client.pid, pending) }
                }
            }
            switch result.terminationStatus {
            case .exited(let code): return code
            case .signaled(let signal): return 128 + signal
            }
        } catch {
            logger.error("could not start \(shell.program) (\(shell.installAdvice)): \(error)")
            return 1
        }
    }
}
