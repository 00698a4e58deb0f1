import AsyncHTTPClient
import Foundation
import NIOCore

/// Debian's `chromedriver` (package `chromium-driver`, which `.ci/run` installs with
/// `chromium`) on a free loopback port, and WebDriver sessions of headless Chromium driven with
/// JSON over HTTP (W3C WebDriver): a test clicks through a real page as a person does.
public final class ChromeDriver: Sendable {
    public let url: String
    private let process: ChildProcess
    private let log: URL

    public static let binary = "/usr/bin/chromedriver"
    public static let chromium = "/usr/bin/chromium"

    /// Starts chromedriver and waits until it says it is ready. Throws, never skips, when it or
    /// Chromium is missing.
    public init() async throws {
        for binary in [Self.binary, Self.chromium] where !FileManager.default.isExecutableFile(atPath: binary) {
            throw FakeServerError(message: "\(binary) is missing: apt-get install chromium chromium-driver (.ci/run does)")
        }
        let port = try TestPushgateway.freeLoopbackPort()
        url = "http://127.0.0.1:\(port)"
        log = FileManager.default.temporaryDirectory.appendingPathComponent("zonefeed-chromedriver-\(port)-\(getpid()).log")
        let descriptors = try ChildProcess.Descriptors(stdout: log.path, stderr: log.path)
        defer { descriptors.close() }
        process = try await ChildProcess(
            executable: Self.binary, arguments: ["--port=\(port)", "--allowed-ips=127.0.0.1"],
            environment: ProcessInfo.processInfo.environment, descriptors: descriptors)
        for _ in 0..<600 {
            if let status = try? await request("GET", "/status"), (status["value"] as? [String: Any])?["ready"] as? Bool == true { return }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        let said = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
        stop()
        throw FakeServerError(message: "chromedriver did not become ready on \(url): \(said)")
    }

    /// Ends chromedriver (and the browsers it started) without waiting for it.
    public func stop() {
        process.signal(SIGTERM)
        try? FileManager.default.removeItem(at: log)
    }

    /// A new headless Chromium, as root needs it (no sandbox), with its profile under `profile`.
    public func newSession(profile: URL) async throws -> Session {
        let arguments = ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--user-data-dir=\(profile.path)"]
        let answer = try await request(
            "POST", "/session",
            [
                "capabilities": [
                    "alwaysMatch": ["browserName": "chrome", "goog:chromeOptions": ["binary": Self.chromium, "args": arguments] as [String: Any]]
                ]
            ])
        guard let value = answer["value"] as? [String: Any], let id = value["sessionId"] as? String else {
            throw FakeServerError(message: "chromedriver did not open a session: \(answer)")
        }
        return Session(driver: self, id: id)
    }

    /// One browser. Every call fails with WebDriver's own error when the page does not allow it.
    public struct Session: Sendable {
        let driver: ChromeDriver
        public let id: String

        public func navigate(to address: String) async throws {
            _ = try await driver.request("POST", "/session/\(id)/url", ["url": address])
        }

        public var currentURL: String {
            get async throws { try await driver.request("GET", "/session/\(id)/url")["value"] as? String ?? "" }
        }

        public var pageText: String {
            get async throws {
                let body = try await element("body")
                return try await driver.request("GET", "/session/\(id)/element/\(body)/text")["value"] as? String ?? ""
            }
        }

        /// Clicks the element a CSS selector finds (`#sign-in`).
        public func click(_ selector: String) async throws {
            let element = try await element(selector)
            _ = try await driver.request("POST", "/session/\(id)/element/\(element)/click", [:])
        }

        /// The visible page as a PNG.
        public func screenshot() async throws -> Data {
            let answer = try await driver.request("GET", "/session/\(id)/screenshot")
            guard let text = answer["value"] as? String, let png = Data(base64Encoded: text) else {
                throw FakeServerError(message: "chromedriver sent no screenshot")
            }
            return png
        }

        /// Closes the browser.
        public func end() async {
            _ = try? await driver.request("DELETE", "/session/\(id)")
        }

        private func element(_ selector: String) async throws -> String {
            let answer = try await driver.request("POST", "/session/\(id)/element", ["using": "css selector", "value": selector])
            // W3C's element reference key.
            guard let found = answer["value"] as? [String: Any], let element = found["element-6066-11e4-a52e-4f735466cecf"] as? String else {
                throw FakeServerError(message: "no element \(selector) on the page: \(answer)")
            }
            return element
        }
    }

    /// One WebDriver command; a WebDriver error (`value.error`) is thrown with its message.
    func request(_ method: String, _ path: String, _ body: [String: Any]? = nil) async throws -> [String: Any] {
        var request = HTTPClientRequest(url: url + path)
        request.method = method == "GET" ? .GET : method == "DELETE" ? .DELETE : .POST
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: body)))
        }
        // Starting a browser on a loaded machine takes a while.
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(180))
        let bytes = try await response.body.collect(upTo: 64 << 20)
        let answer = (try? JSONSerialization.jsonObject(with: Data(bytes.readableBytesView)) as? [String: Any]) ?? [:]
        if let value = answer["value"] as? [String: Any], let error = value["error"] as? String {
            throw FakeServerError(message: "WebDriver \(method) \(path): \(error): \(value["message"] as? String ?? "")")
        }
        return answer
    }
}
