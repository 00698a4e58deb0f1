import FakeCloudKit
import Foundation
import TestSupport
import Testing
import Yams

/// docker/compose.yml and docker/kubernetes/ as a user deploys them: they parse, they say what
/// they mean, and the exit codes they act on are the ones zonefeed really exits with.
@Suite struct DeploymentFilesTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func yaml(_ path: String) throws -> [String: Any] {
        let text = try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
        return try #require(try Yams.load(yaml: text) as? [String: Any], "\(path) is a YAML mapping")
    }

    /// A value at a dotted path of nested mappings.
    static func value(_ object: Any?, _ path: String) -> Any? {
        path.split(separator: ".").reduce(object) { ($0 as? [String: Any])?[String($1)] }
    }

    /// `zonefeed validate` of a pipeline file with `environment` and nothing else set.
    static func validate(_ file: String, environment: [String: String]) async throws -> ZonefeedBinary.Output {
        let zonefeed = try ZonefeedBinary(environment: environment)
        defer { zonefeed.remove() }
        return try await zonefeed.run(["validate", file])
    }

    @Test func theCronJobFailsAtOnceExactlyOnTheExitCodesThatNeedAPerson() async throws {
        let cronJob = try Self.yaml("docker/kubernetes/cronjob.yaml")
        #expect(cronJob["kind"] as? String == "CronJob" && cronJob["apiVersion"] as? String == "batch/v1")
        #expect(Self.value(cronJob, "spec.concurrencyPolicy") as? String == "Forbid")
        let job = try #require(Self.value(cronJob, "spec.jobTemplate.spec") as? [String: Any])
        #expect((job["backoffLimit"] as? Int ?? 0) > 0, "a failed run (exit 1) is retried")
        #expect(Self.value(job, "template.spec.restartPolicy") as? String == "Never", "podFailurePolicy needs it")
        let containers = try #require(Self.value(job, "template.spec.containers") as? [[String: Any]])
        let rules = try #require(Self.value(job, "podFailurePolicy.rules") as? [[String: Any]])
        let failJob = try #require(rules.first { $0["action"] as? String == "FailJob" })
        #expect(Self.value(failJob, "onExitCodes.containerName") as? String == containers.first?["name"] as? String)
        #expect(Self.value(failJob, "onExitCodes.operator") as? String == "In")
        let named = Set(try #require(Self.value(failJob, "onExitCodes.values") as? [Int]))

        // The codes zonefeed really exits with: a refused web auth token, a broken pipeline file,
        // and a run that failed and may succeed later.
        let s = try await CloudKitEndToEndTests.Setup("exitcodes", fake: FakeSettings(seed: 91, zones: 1, recordsPerZone: 50)) {
            $0.webAuthToken = "a-token-the-server-never-issued"
        }
        defer { s.stop() }
        let refused = try await s.run()
        let broken = try await s.zonefeed.run(["run", try s.p.write(to: s.zonefeed.directory).replacingOccurrences(of: ".yml", with: ".missing.yml")])
        #expect(refused.status == 3 && broken.status == 2, "\(refused.stderr) \(broken.stderr)")
        #expect(named == [Int(refused.status), Int(broken.status)], "FailJob on exactly the codes that need a person")
        #expect(!named.contains(1) && !named.contains(143), "a failed or evicted run is retried")
    }

    /// The two Jobs that share one pipeline among pods: as many pods at once as in all, the
    /// same exit codes as the CronJob's failing the Job, and arguments zonefeed takes once
    /// Kubernetes has put the pod's name or index in (docs/scale-out.md).
    @Test(arguments: ["job-parallel.yaml", "job-indexed.yaml"])
    func theScaleOutJobsRunTheirPodsAtOnceAndPassArgumentsZonefeedTakes(_ file: String) async throws {
        let job = try Self.yaml("docker/kubernetes/\(file)")
        let cronJob = try Self.yaml("docker/kubernetes/cronjob.yaml")
        #expect(job["kind"] as? String == "Job" && job["apiVersion"] as? String == "batch/v1")
        let parallelism = try #require(Self.value(job, "spec.parallelism") as? Int)
        #expect(parallelism > 1 && Self.value(job, "spec.completions") as? Int == parallelism, "every pod runs at once")
        #expect(
            (Self.value(job, "spec.podFailurePolicy.rules") as? [[String: Any]])?.first.map { Self.value($0, "onExitCodes.values") as? [Int] }
                == (Self.value(cronJob, "spec.jobTemplate.spec.podFailurePolicy.rules") as? [[String: Any]])?.first.map {
                    Self.value($0, "onExitCodes.values") as? [Int]
                }, "the codes that need a person fail the Job, as in the CronJob")
        let container = try #require((Self.value(job, "spec.template.spec.containers") as? [[String: Any]])?.first)
        let environment = (container["env"] as? [[String: Any]] ?? []).compactMap { $0["name"] as? String }
        var arguments = try #require(container["args"] as? [String])
        for (i, argument) in arguments.enumerated() {
            for name in environment { arguments[i] = arguments[i].replacingOccurrences(of: "$(\(name))", with: "2") }
            #expect(!arguments[i].contains("$("), "every $(VAR) of \(argument) is in the container's env")
        }
        #expect(Self.value(job, "spec.completionMode") as? String == "Indexed", "each pod has an index, which names its metrics group")
        #expect(arguments.firstIndex(of: "--metrics-instance").map { arguments[$0 + 1].hasSuffix("2") } == true, "the group is the index's")
        if let shard = arguments.firstIndex(of: "--shard").map({ arguments[$0 + 1] }) {
            #expect(shard == "2/\(parallelism)", "the shard's count is the Job's")
        }
        #expect((file == "job-indexed.yaml") == arguments.contains("--shard"), "only the indexed recipe splits the zones by index")
        // The pipeline file is missing here: zonefeed gets past its arguments to say so.
        arguments[1] = "missing.yml"
        let zonefeed = try ZonefeedBinary(environment: [:])
        defer { zonefeed.remove() }
        let output = try await zonefeed.run(arguments)
        #expect(output.status == 2 && output.stderr.contains("missing.yml"), "\(output.status) \(output.stderr)")
    }

    @Test func theConfigMapsPipelineValidatesWithTheSecretsVariablesAndKeepsTokensInTheDatabase() async throws {
        let configMap = try Self.yaml("docker/kubernetes/configmap.yaml")
        let secret = try Self.yaml("docker/kubernetes/secret.yaml")
        let cronJob = try Self.yaml("docker/kubernetes/cronjob.yaml")
        #expect(configMap["kind"] as? String == "ConfigMap" && secret["kind"] as? String == "Secret")
        let pipeline = try #require((configMap["data"] as? [String: Any])?["pipeline.yml"] as? String)
        let environment = try #require(Self.value(secret, "stringData") as? [String: String])
        let container = try #require((Self.value(cronJob, "spec.jobTemplate.spec.template.spec.containers") as? [[String: Any]])?.first)
        // The CronJob mounts this ConfigMap and reads this Secret.
        let volumes = Self.value(cronJob, "spec.jobTemplate.spec.template.spec.volumes") as? [[String: Any]] ?? []
        #expect(volumes.contains { Self.value($0, "configMap.name") as? String == Self.value(configMap, "metadata.name") as? String })
        #expect(
            (container["envFrom"] as? [[String: Any]])?.contains {
                Self.value($0, "secretRef.name") as? String == Self.value(secret, "metadata.name") as? String
            } == true)
        #expect((container["args"] as? [String])?.contains("/etc/zonefeed/pipeline.yml") == true)

        let zonefeed = try ZonefeedBinary(environment: environment)
        defer { zonefeed.remove() }
        let file = zonefeed.directory.appendingPathComponent("pipeline.yml").path
        try pipeline.write(toFile: file, atomically: true, encoding: .utf8)
        let output = try await zonefeed.run(["validate", file])
        #expect(output.status == 0, "\(output.stdout)\(output.stderr)")
        #expect(output.stdout.contains("webAuthTokenStore database"), "a pod's disk does not outlive it: \(output.stdout)")
        #expect(!output.stdout.contains(environment["CLOUDKIT_WEB_AUTH_TOKEN"]!), "no secret in the plan")
    }

    @Test func composeStartsTheRunOnceTheDatabaseIsHealthyAndItsPipelineValidates() async throws {
        let compose = try Self.yaml("docker/compose.yml")
        let services = try #require(compose["services"] as? [String: Any])
        let healthcheck = try #require(Self.value(services, "db.healthcheck.test") as? [String])
        #expect(healthcheck.joined(separator: " ").contains("pg_isready -h 127.0.0.1"), "ready over TCP, not the init scripts' socket")
        #expect(Self.value(services, "zonefeed.depends_on.db.condition") as? String == "service_healthy")
        let fakeServer = try #require(Self.value(services, "fake-cloudkit.command") as? [String])
        #expect(fakeServer.starts(with: ["fake-server", "--host", "0.0.0.0"]), "reachable from the other containers")
        #expect(Self.value(services, "fake-cloudkit.build.dockerfile") as? String == "docker/Dockerfile")

        let command = try #require(Self.value(services, "zonefeed.command") as? [String])
        #expect(command.first == "run")
        let environment = try #require(Self.value(services, "zonefeed.environment") as? [String: String])
        let output = try await Self.validate(Self.root.appendingPathComponent(command[1]).path, environment: environment)
        #expect(output.status == 0, "\(output.stdout)\(output.stderr)")
        #expect(output.stdout.contains(environment["FAKE_CLOUDKIT_URL"]!), "the run reads the compose fake server: \(output.stdout)")
    }

    /// The watch Deployment: it reads the CronJob's ConfigMap and Secret, its probes ask the port
    /// its watcher listens on, and its very arguments start a watcher whose `/healthz` turns 200
    /// once caught up and which exits 0 on SIGTERM within the grace period.
    @Test func theWatchDeploymentsProbesAskTheWatcherItsArgumentsStart() async throws {
        let deployment = try Self.yaml("docker/kubernetes/watch-deployment.yaml")
        let cronJob = try Self.yaml("docker/kubernetes/cronjob.yaml")
        #expect(deployment["kind"] as? String == "Deployment" && deployment["apiVersion"] as? String == "apps/v1")
        #expect((Self.value(deployment, "spec.replicas") as? Int ?? 0) >= 2, "replicas share the zones through PostgreSQL locks")
        let pod = try #require(Self.value(deployment, "spec.template.spec") as? [String: Any])
        let podOfJob = try #require(Self.value(cronJob, "spec.jobTemplate.spec.template.spec") as? [String: Any])
        let container = try #require((pod["containers"] as? [[String: Any]])?.first)
        let containerOfJob = try #require((podOfJob["containers"] as? [[String: Any]])?.first)
        #expect(Self.value(container, "envFrom") as? [[String: String]] == Self.value(containerOfJob, "envFrom") as? [[String: String]])
        let configMaps = { (spec: [String: Any]) in (spec["volumes"] as? [[String: Any]] ?? []).compactMap { Self.value($0, "configMap.name") as? String } }
        #expect(configMaps(pod) == configMaps(podOfJob) && !configMaps(pod).isEmpty, "the same pipeline file")

        let arguments = try #require(container["args"] as? [String])
        #expect(arguments.first == "watch" && arguments.dropFirst().first == "/etc/zonefeed/pipeline.yml")
        let listenIndex = try #require(arguments.firstIndex(of: "--listen")).advanced(by: 1)
        let port = try #require(arguments[listenIndex].split(separator: ":").last.flatMap { Int($0) })
        let portName = try #require(
            (container["ports"] as? [[String: Any]])?.first { $0["containerPort"] as? Int == port }?["name"] as? String, "the port is declared")
        for probe in ["readinessProbe", "startupProbe", "livenessProbe"] {
            #expect(Self.value(container, "\(probe).httpGet.path") as? String == "/healthz", "\(probe)")
            #expect(Self.value(container, "\(probe).httpGet.port") as? String == portName, "\(probe) asks the port zonefeed listens on")
        }
        let annotations = Self.value(deployment, "spec.template.metadata.annotations") as? [String: String]
        #expect(annotations?["prometheus.io/port"] == "\(port)" && annotations?["prometheus.io/path"] == "/metrics")
        let grace = try #require(pod["terminationGracePeriodSeconds"] as? Int)

        // Those arguments on a watcher of the fake server: the test's pipeline file and any free
        // loopback port in place of the pod's.
        let s = try await CloudKitEndToEndTests.Setup("deploywatch", fake: FakeSettings(seed: 111, zones: 1, recordsPerZone: 50))
        defer { s.stop() }
        var local = arguments
        local[1] = s.file
        local[listenIndex] = "127.0.0.1:0"
        var zonefeed = s.zonefeed
        zonefeed.environment.merge(s.p.environment) { _, new in new }
        let watching = try await zonefeed.start(local)
        defer { watching.end() }
        let base = try #require(await WatchTests.listeningAddress(of: watching), "\(watching.stderrSoFar)")
        let health = try await WatchTests.get(base + "/healthz", until: 200)
        #expect(health.status == 200, "ready once caught up: \(health) \(watching.stderrSoFar)")
        #expect(try await s.liveDifferences() == [])
        let clock = ContinuousClock()
        let stopping = clock.now
        let stopped = await watching.stop()
        let took = clock.now - stopping
        #expect(stopped.status == 0, "\(stopped.stderr)")
        #expect(took < .seconds(grace), "stopped in \(took), within the \(grace) s grace period")
        #expect(stopped.stderr.contains("\"message\":\"watch stopped\""), "JSON logs, as --log-format json says: \(stopped.stderr)")
    }
}
