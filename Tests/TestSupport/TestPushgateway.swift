import AsyncHTTPClient
import Foundation
import NIOCore
import Synchronization

/// A real Prometheus Pushgateway (Debian's `prometheus-pushgateway`, which `.ci/run` installs)
/// on a free loopback port, without persistence, stopped with the test.
public final class TestPushgateway: Sendable {
    public let url: String
    private let process: ChildProcess
    private let log: URL

    public static let binary = "/usr/bin/prometheus-pushgateway"

    /// A user the gateway asks for by Basic authentication, when started with one: its password
    /// holds the characters a URL must percent-encode.
    public struct User: Sendable {
        public let name: String
        public let password: String
        /// `password`'s bcrypt hash, cost 4, as `--web.config.file` takes it.
        let bcrypt: String

        public static let operations = User(name: "ops", password: "s3cr%t:@", bcrypt: "$2b$04$nTUhV/IHBSAPQqTelvKiye8grmxA9Mk1KwvxAWx7Dp1tIGF5u2pGS")

        /// The user and password as a URL's user part, percent-encoded.
        public var inURL: String {
            let allowed = CharacterSet.alphanumerics
            return "\(name):\(password.addingPercentEncoding(withAllowedCharacters: allowed) ?? password)@"
        }
    }

    private let user: User?

    /// Started asking every request for `user`'s Basic authentication when one is given.
    public init(requiring user: User? = nil) async throws {
        self.user = user
        guard FileManager.default.isExecutableFile(atPath: Self.binary) else {
            throw FakeServerError(message: "\(Self.binary) is missing: apt-get install prometheus-pushgateway (.ci/run does)")
        }
        let port = try Self.freeLoopbackPort()
        url = "http://127.0.0.1:\(port)"
        log = FileManager.default.temporaryDirectory.appendingPathComponent("zonefeed-pushgateway-\(port)-\(getpid()).log")
        // Debian's build persists to /var/lib/prometheus unless told: each test gateway starts empty.
        var arguments = ["--web.listen-address=127.0.0.1:\(port)", "--persistence.file=", "--log.level=warn"]
        if let user {
            let webConfig = log.deletingPathExtension().appendingPathExtension("web.yml")
            try "basic_auth_users:\n  \(user.name): \(user.bcrypt)\n".write(to: webConfig, atomically: true, encoding: .utf8)
            arguments.append("--web.config.file=\(webConfig.path)")
        }
        let descriptors = try ChildProcess.Descriptors(stdout: log.path, stderr: log.path)
        defer { descriptors.close() }
        process = try await ChildProcess(
            executable: Self.binary, arguments: arguments, environment: ProcessInfo.processInfo.environment, descriptors: descriptors)
        for _ in 0..<200 {
            if let ready = try? await get("/-/ready"), ready.status == 200 { return }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        let said = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
        stop()
        throw FakeServerError(message: "the Pushgateway did not become ready on \(url): \(said)")
    }

    /// Stops the gateway (SIGTERM, without waiting: its task reaps it) and removes its log, which
    /// nothing reads once it has started: the temporary folder keeps nothing of a test.
    public func stop() {
        process.signal(SIGTERM)
        try? FileManager.default.removeItem(at: log)
        try? FileManager.default.removeItem(at: log.deletingPathExtension().appendingPathExtension("web.yml"))
    }

    /// What the gateway serves to Prometheus: every pushed group's metrics, in text format.
    public func metrics() async throws -> String {
        let (status, body) = try await get("/metrics")
        guard status == 200 else { throw FakeServerError(message: "the Pushgateway answered \(status): \(body)") }
        return body
    }

    private func get(_ path: String) async throws -> (status: UInt, body: String) {
        var request = HTTPClientRequest(url: url + path)
        if let user { request.setBasicAuth(username: user.name, password: user.password) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(60))
        let body = try await response.body.collect(upTo: 16 << 20)
        return (response.status.code, String(buffer: body))
    }

    /// A loopback port free now, for a server the test starts and must name in advance. It lies
    /// below the kernel's ephemeral range (`ip_local_port_range`), where no `bind` to port 0 and
    /// no outgoing connection lands: a port taken from that range could be given to another
    /// process in the instant before the test's server binds it (CI met it: `Address already in
    /// use`). This process never hands the same port out twice.
    public static func freeLoopbackPort() throws -> Int {
        let ephemeralStart =
            (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8))
            .flatMap { $0.split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) } } ?? 32_768
        let candidates = 10_000..<max(10_001, min(ephemeralStart, 65_536))
        for _ in 0..<1_000 {
            let port = Int.random(in: candidates)
            guard handedOut.withLock({ $0.insert(port).inserted }), canBind(port) else { continue }
            return port
        }
        throw FakeServerError(message: "no free loopback port below \(ephemeralStart) after 1,000 tries")
    }

    private static let handedOut = Mutex<Set<Int>>([])

    private static func canBind(_ port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        let length = socklen_t(MemoryLayout<sockaddr_in>.size)
        return withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } } == 0
    }
}

/// Prometheus' text exposition format, read strictly: every line is a `# HELP`, a `# TYPE` or a
/// sample of a metric whose TYPE came before it; anything else is an error naming the line.
public struct PrometheusText: Sendable {
    public struct Sample: Sendable, Hashable {
        public var name: String
        public var labels: [String: String]
        public var value: Double
    }

    public var samples: [Sample] = []
    public var types: [String: String] = [:]
    public var help: [String: String] = [:]

    public init(parsing text: String) throws {
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = String(raw)
            func fail(_ why: String) -> FakeServerError { FakeServerError(message: "line \(index + 1): \(why): \(line)") }
            if line.isEmpty { continue }
            if line.hasPrefix("# HELP ") || line.hasPrefix("# TYPE ") {
                let parts = line.dropFirst(7).split(separator: " ", maxSplits: 1).map(String.init)
                guard parts.count == 2, Self.isMetricName(parts[0]) else { throw fail("a comment line without a metric name and text") }
                if line.hasPrefix("# HELP ") {
                    help[parts[0]] = parts[1]
                } else {
                    guard ["counter", "gauge", "histogram", "summary", "untyped"].contains(parts[1]) else { throw fail("an unknown type") }
                    types[parts[0]] = parts[1]
                }
                continue
            }
            guard !line.hasPrefix("#") else { continue }
            var name = ""
            var labels: [String: String] = [:]
            var rest = Substring(line)
            while let c = rest.first, c != "{" && c != " " {
                name.append(c)
                rest = rest.dropFirst()
            }
            guard Self.isMetricName(name) else { throw fail("not a metric name") }
            if rest.first == "{" {
                rest = rest.dropFirst()
                while rest.first != "}" {
                    guard let equals = rest.firstIndex(of: "=") else { throw fail("a label without '='") }
                    let key = String(rest[..<equals])
                    guard Self.isMetricName(key), rest[rest.index(after: equals)] == "\"" else { throw fail("a bad label") }
                    rest = rest[rest.index(equals, offsetBy: 2)...]
                    var value = ""
                    while let c = rest.first, c != "\"" {
                        if c == "\\" {
                            rest = rest.dropFirst()
                            guard let escaped = rest.first else { throw fail("an unfinished escape") }
                            value.append(escaped == "n" ? "\n" : escaped)
                        } else {
                            value.append(c)
                        }
                        rest = rest.dropFirst()
                    }
                    guard !rest.isEmpty else { throw fail("an unterminated label value") }
                    rest = rest.dropFirst()
                    labels[key] = value
                    if rest.first == "," { rest = rest.dropFirst() }
                    guard !rest.isEmpty else { throw fail("an unterminated label set") }
                }
                rest = rest.dropFirst()
            }
            let fields = rest.split(separator: " ")
            guard (1...2).contains(fields.count), let value = Double(fields[0]) ?? Self.special(fields[0]) else { throw fail("no value") }
            let family = types[name] != nil ? name : Self.family(of: name)
            guard types[family] != nil else { throw fail("a sample before its TYPE line") }
            samples.append(Sample(name: name, labels: labels, value: value))
        }
    }

    /// The value of the one sample with that name whose labels include `labels`.
    public func value(_ name: String, _ labels: [String: String] = [:]) -> Double? {
        let matching = samples.filter { sample in sample.name == name && labels.allSatisfy { sample.labels[$0.key] == $0.value } }
        return matching.count == 1 ? matching[0].value : nil
    }

    static func isMetricName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, !("0"..."9").contains(first) else { return false }
        return name.unicodeScalars.allSatisfy { $0.isASCII && (CharacterSet.alphanumerics.contains($0) || $0 == "_" || $0 == ":") }
    }

    static func special(_ text: Substring) -> Double? {
        switch text {
        case "+Inf": return .infinity
        case "-Inf": return -.infinity
        case "NaN": return .nan
        default: return nil
        }
    }

    /// `x_bucket`, `x_sum`, `x_count` belong to `x`.
    static func family(of name: String) -> String {
        for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) { return String(name.dropLast(suffix.count)) }
        return name
    }
}
