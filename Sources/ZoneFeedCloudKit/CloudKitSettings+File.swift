import CloudKitWebServices
import ZoneFeed

extension CloudKitSettings: SourceConfiguration {
    public static let key = "cloudkit"
    /// The longest API token taken from the file or its variables (a web auth token's is
    /// `CloudKitClient.maxWebAuthTokenBytes`, what the token file keeps).
    static let maxTokenBytes = 16 * 1024

    public var namedZones: [String]? {
        if case .named(let names) = zones { return names }
        return nil
    }

    public static func read(_ source: PipelineSection, pipelineName: String?, from file: PipelineFileReader) -> CloudKitSettings? {
        let allowed = reference.keys.keys(in: "source.cloudkit")
        guard let section = file.subsection("cloudkit", in: source, allowed: allowed, required: true) else { return nil }
        let reported = file.diagnostics.count

        var baseURL: String?
        if let value = file.text("baseURL", in: section, expected: "an http:// or https:// URL") {
            if value.text.hasPrefix("https://") || value.text.hasPrefix("http://") {
                // The client appends paths that start with '/'.
                var url = value.text
                while url.hasSuffix("/") { url.removeLast() }
                baseURL = url
            } else {
                file.report("baseURL \(InertText.quoted(value.text)) must start with https:// (or http:// for a local fake server)", at: value.position)
            }
        }

        var container: String?
        if let value = file.text("container", in: section, expected: "a container identifier such as iCloud.com.example.notes", required: true) {
            if value.text.hasPrefix("iCloud."), value.text.count > "iCloud.".count {
                container = value.text
            } else {
                file.report(
                    "container \(InertText.quoted(value.text)) must be a CloudKit container identifier starting with 'iCloud.', such as iCloud.com.example.notes",
                    at: value.position
                )
            }
        }

        let environment = file.choice(CloudKitSettings.Environment.self, "environment", in: section)
        let database = file.choice(CloudKitSettings.Database.self, "database", in: section)
        let zones = readZones(in: section, from: file)
        let queryLag = readDuration("queryLag", in: section, range: CloudKitSettings.queryLagSecondsRange, from: file)
        let deletionSweep = readDeletionSweep(in: section, from: file)
        let resultsLimit = file.integer("resultsLimit", in: section, range: CloudKitSettings.resultsLimitRange)
        let desiredKeys = file.stringList("desiredKeys", in: section, expected: "a list of field names such as [title, body]")
        let timeout = file.number("timeoutSeconds", in: section, range: CloudKitSettings.timeoutSecondsRange, unit: "seconds")
        let maxAttempts = file.integer("maxAttempts", in: section, range: CloudKitSettings.maxAttemptsRange)
        let retryBudget = file.number("retryBudgetSeconds", in: section, range: CloudKitSettings.retryBudgetSecondsRange, unit: "seconds")
        let maxConcurrentRequests = file.integer("maxConcurrentRequests", in: section, range: CloudKitSettings.maxConcurrentRequestsRange)
        let idleTimeout = file.number("idleTimeoutSeconds", in: section, range: CloudKitSettings.idleTimeoutSecondsRange, unit: "seconds")
        let maxRetryAfter = file.number("maxRetryAfterSeconds", in: section, range: CloudKitSettings.maxRetryAfterSecondsRange, unit: "seconds")
        let maxResponseBytes = file.integer("maxResponseBytes", in: section, range: CloudKitSettings.maxResponseBytesRange)
        // A database the file names wrongly was reported: its auth is not judged against a guess.
        let auth = readAuth(in: section, database: section["database"] == nil ? .private : database, from: file)
        let tlsCAFile = readTLS(in: section, from: file)
        if database == .public, let entry = section["zones"], zones != .named([ZoneID.defaultZoneName]) {
            file.report(
                "the public database has one zone, \(ZoneID.defaultZoneName), which zonefeed reads by query: remove \(section.path(of: "zones"))",
                at: entry.keyPosition)
        }
        guard file.diagnostics.count == reported, let container, let auth else { return nil }

        var settings = CloudKitSettings(container: container, auth: auth)
        if let baseURL { settings.baseURL = baseURL }
        if let environment { settings.environment = environment }
        if let database { settings.database = database }
        if let zones { settings.zones = zones }
        if database == .public { settings.zones = .named([ZoneID.defaultZoneName]) }
        if let queryLag { settings.queryLagSeconds = queryLag }
        if let deletionSweep { settings.deletionSweep = deletionSweep }
        if let resultsLimit { settings.resultsLimit = resultsLimit }
        settings.desiredKeys = desiredKeys
        if let timeout { settings.timeoutSeconds = timeout }
        if let maxAttempts { settings.maxAttempts = maxAttempts }
        if let retryBudget { settings.retryBudgetSeconds = retryBudget }
        if let maxConcurrentRequests { settings.maxConcurrentRequests = maxConcurrentRequests }
        if let idleTimeout { settings.idleTimeoutSeconds = idleTimeout }
        if let maxRetryAfter { settings.maxRetryAfterSeconds = maxRetryAfter }
        if let maxResponseBytes { settings.maxResponseBytes = maxResponseBytes }
        settings.tlsCAFile = tlsCAFile
        if settings.database != .public, settings.auth.webAuthTokenFile == nil, settings.auth.webAuthTokenStore == .file, let pipelineName {
            // Tokens rotate with every request: a run that did not keep the newest could not
            // start again after a crash.
            settings.auth.webAuthTokenFile = ".zonefeed/\(pipelineName).web-auth-token"
            settings.auth.webAuthTokenFileIsDefault = true
        }
        return settings
    }

    /// `all`, or a non-empty list of zone names.
    static func readZones(in section: PipelineSection, from file: PipelineFileReader) -> ZoneSelection? {
        guard let entry = section["zones"], !file.isNull(entry.value) else { return nil }
        let path = section.path(of: "zones")
        let expected = "'all' or a list of zone names such as [Notes, Archive]"
        if case .scalar = entry.value {
            guard let value = file.scalarValue(entry.value, path: path, expected: expected) else { return nil }
            if value.text == "all" { return .all }
            file.report(
                "\(path) must be \(expected), not \(InertText.quoted(value.text)) (did you mean [\(InertText.escaped(InertText.capped(value.text, limit: InertText.quotedLength)))]?)",
                at: value.position)
            return nil
        }
        guard let names = file.stringList("zones", in: section, expected: expected) else { return nil }
        guard !names.isEmpty else {
            file.report("\(path) is an empty list: name at least one zone, or write 'zones: all'", at: entry.valuePosition)
            return nil
        }
        var seen: Set<String> = []
        var failed = false
        for name in names {
            if name.isEmpty {
                file.report("a zone name in \(path) is empty", at: entry.valuePosition)
                failed = true
            } else if !seen.insert(name).inserted {
                file.report("zone \(InertText.quoted(name)) is listed twice in \(path)", at: entry.valuePosition)
                failed = true
            }
        }
        return failed ? nil : .named(names)
    }

    /// `tls: {caFile: PATH}`: the file is read now, so that one that is missing or holds no
    /// certificate is refused at its line rather than at the first connection.
    static func readTLS(in cloudKit: PipelineSection, from file: PipelineFileReader) -> String? {
        guard let section = file.subsection("tls", in: cloudKit, allowed: reference.keys.keys(in: "source.cloudkit.tls"), required: false),
            let value = file.nonEmptyText("caFile", in: section, expected: "the path of a PEM file of CA certificates")
        else { return nil }
        do {
            _ = try TLSTrust.reading(caFile: value)
        } catch {
            file.report("\(section.path(of: "caFile")): \(error)", at: section["caFile"]?.valuePosition ?? section.position)
            return nil
        }
        return value
    }

    static func readAuth(in cloudKit: PipelineSection, database: CloudKitSettings.Database?, from file: PipelineFileReader) -> CloudKitSettings.Auth? {
        let allowed = reference.keys.keys(in: "source.cloudkit.auth")
        guard let section = file.subsection("auth", in: cloudKit, allowed: allowed, required: true) else { return nil }
        let reported = file.diagnostics.count

        let apiToken = file.secret("apiToken", in: section, emptyMeansAbsent: false)
        // An empty web auth token (`${CLOUDKIT_WEB_AUTH_TOKEN:-}`) leaves it to webAuthTokenFile.
        let webAuthToken = file.secret("webAuthToken", in: section, emptyMeansAbsent: true)
        // A token is a few hundred bytes; megabytes are a variable set to the wrong thing, and
        // would go out in every request's address (never quoted: it may still be a secret).
        for (key, secret, most) in [("apiToken", apiToken, Self.maxTokenBytes), ("webAuthToken", webAuthToken, CloudKitClient.maxWebAuthTokenBytes)] {
            guard let secret, secret.value.utf8.count > most, let position = section[key]?.valuePosition else { continue }
            file.report(
                "\(section.path(of: key)) is \(secret.value.utf8.count) bytes long, and a token is a few hundred (at most \(most)): "
                    + "check what it is set from", at: position)
        }
        let webAuthTokenFile = file.nonEmptyText("webAuthTokenFile", in: section, expected: "a file path")
        let webAuthTokenStore = file.choice(CloudKitSettings.TokenStore.self, "webAuthTokenStore", in: section)
        let serverKey = readServerKey(in: section, from: file)

        // Only a key that is not there at all is "missing"; one that is there but unusable (an
        // unset variable, say) was reported where it is.
        if section["apiToken"] == nil && section["serverKey"] == nil {
            file.report(
                "missing required key 'apiToken' in \(section.path) (or, for the public database, sign requests server-to-server with serverKey)",
                at: section.position
            )
        }
        if database == .public {
            // The public database is read as the key's developer, or anonymously with the API
            // token alone: a user's sign-in has no place here.
            for key in ["webAuthToken", "webAuthTokenFile", "webAuthTokenStore"] {
                guard let entry = section[key] else { continue }
                file.report(
                    "\(section.path(of: key)): the public database is read without a user's sign-in (with serverKey, or the apiToken alone); remove it",
                    at: entry.keyPosition)
            }
        } else if let database, let entry = section["serverKey"] {
            file.report(
                "\(section.path(of: "serverKey")): a server-to-server key reaches the public database only (database: public); "
                    + "the \(database.rawValue) database needs a user's web auth token (zonefeed login)",
                at: entry.keyPosition)
        }
        if webAuthTokenStore == .database, let tokenFile = section["webAuthTokenFile"] {
            file.report(
                "webAuthTokenFile names a file, but webAuthTokenStore is database in \(section.path): the tokens are kept in one place; remove one",
                at: tokenFile.keyPosition)
        }
        guard file.diagnostics.count == reported else { return nil }
        var auth = CloudKitSettings.Auth(
            apiToken: apiToken, webAuthToken: webAuthToken, webAuthTokenFile: webAuthTokenFile, serverKey: serverKey?.key,
            serverKeySource: serverKey?.source)
        if let webAuthTokenStore { auth.webAuthTokenStore = webAuthTokenStore }
        return auth
    }

    /// `serverKey: {keyID, privateKeyFile | privateKey}`: the key is read and parsed now, so that
    /// one that is missing or not a P-256 PEM key is refused at its line. Neither the key nor
    /// its ID is ever quoted.
    static func readServerKey(in auth: PipelineSection, from file: PipelineFileReader) -> (key: ServerKey, source: String)? {
        guard let section = file.subsection("serverKey", in: auth, allowed: reference.keys.keys(in: "source.cloudkit.auth.serverKey"), required: false)
        else { return nil }
        let reported = file.diagnostics.count
        let keyID = file.secret("keyID", in: section, emptyMeansAbsent: false, required: true)
        // The ID goes out in a header, which cannot hold a control character: the HTTP client
        // refused each request, retried as a network fault, with the ID in its message.
        if let keyID, let control = keyID.value.unicodeScalars.first(where: { $0.value < 0x20 || $0.value == 0x7F }) {
            let newline = control == "\n" || control == "\r"
            file.report(
                "\(section.path(of: "keyID")) holds a control character (U+\(String(format: "%04X", control.value))"
                    + (newline ? ", a line's end: a secret made from a file keeps the file's last newline" : "")
                    + "), which a request's header cannot carry: set it to the key ID CloudKit Dashboard shows, hexadecimal digits alone",
                at: section["keyID"]?.valuePosition ?? section.position)
        }
        let path = file.text("privateKeyFile", in: section, expected: "the path of a PEM private key file")
        let pem = file.secret("privateKey", in: section, emptyMeansAbsent: false)
        switch (section["privateKeyFile"], section["privateKey"]) {
        case (nil, nil):
            file.report(
                "\(section.path) needs privateKeyFile (the PEM file 'zonefeed key create' wrote) or privateKey (the PEM itself, from a variable)",
                at: section.position)
        case (.some, .some(let second)):
            file.report("\(section.path) has both privateKeyFile and privateKey: give the key one way", at: second.keyPosition)
        default:
            break
        }
        guard file.diagnostics.count == reported, let keyID else { return nil }
        do {
            if let path {
                return (try ServerKey(keyID: keyID.value, pemFile: path.text), path.text)
            }
            if let pem {
                return (try ServerKey(keyID: keyID.value, pem: pem.value), "privateKey")
            }
        } catch {
            let key = path != nil ? "privateKeyFile" : "privateKey"
            file.report("\(section.path(of: key)): \(error)", at: section[key]?.valuePosition ?? section.position)
        }
        return nil
    }

    /// A time: seconds, or a number with a unit (`90s`, `5m`, `24h`, `7d`).
    static func readDuration(_ key: String, in section: PipelineSection, range: ClosedRange<Double>, from file: PipelineFileReader) -> Double? {
        let expected = "a time such as 30s, 5m, 24h or 7d"
        guard let value = file.text(key, in: section, expected: expected) else { return nil }
        return duration(value, path: section.path(of: key), expected: expected, range: range, from: file)
    }

    /// `value` as a time within `range`; reported at its place when it is none.
    static func duration(
        _ value: PipelineValue, path: String, expected: String, range: ClosedRange<Double>, from file: PipelineFileReader
    ) -> Double? {
        guard let seconds = parseDuration(value.text) else {
            file.report("\(path) must be \(expected), not \(InertText.quoted(value.text))", at: value.position)
            return nil
        }
        guard range.contains(seconds) else {
            file.report(
                "\(path) must be between \(CloudKitSettings.durationText(range.lowerBound)) and \(CloudKitSettings.durationText(range.upperBound)), "
                    + "not \(InertText.quoted(value.text))", at: value.position)
            return nil
        }
        return seconds
    }

    /// `30s`, `5m`, `24h`, `7d`, or a plain number of seconds; nil for anything else.
    static func parseDuration(_ text: String) -> Double? {
        let units: [Character: Double] = ["s": 1, "m": 60, "h": 3_600, "d": 86_400]
        var digits = Substring(text.trimmingSpaces())
        var unit = 1.0
        if let last = digits.last, let scale = units[last] {
            unit = scale
            digits = digits.dropLast()
        }
        guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }), let number = Double(digits), number.isFinite
        else { return nil }
        return number * unit
    }

    /// `deletionSweep`: `never`, `every: N runs` (or `every N runs`), or a time (`24h`).
    static func readDeletionSweep(in section: PipelineSection, from file: PipelineFileReader) -> CloudKitSettings.DeletionSweep? {
        let expected = "never, a time such as 24h, or every: 10 runs"
        guard let entry = section["deletionSweep"], !file.isNull(entry.value) else { return nil }
        let path = section.path(of: "deletionSweep")
        var text: PipelineValue
        var words: [String]
        if file.isMapping(entry.value, withKey: "every") {
            guard let every = file.section(entry.value, path: path, position: entry.valuePosition, allowed: ["every"]),
                let value = file.text("every", in: every, expected: "a number of runs such as 10 runs")
            else { return nil }
            text = value
            words = ["every"] + value.text.split(separator: " ").map(String.init)
        } else {
            guard let value = file.scalarValue(entry.value, path: path, expected: expected) else { return nil }
            text = value
            words = value.text.split(separator: " ").map(String.init)
        }
        if words == ["never"] { return .never }
        if words.first == "every", words.count <= 3, words.count >= 2, words.count == 2 || ["run", "runs"].contains(words[2]) {
            guard let runs = Int(words[1]), CloudKitSettings.deletionSweepRunsRange.contains(runs) else {
                file.report(
                    "\(path) must sweep every 1 to \(CloudKitSettings.deletionSweepRunsRange.upperBound.grouped) runs, not \(InertText.quoted(text.text))",
                    at: text.position)
                return nil
            }
            return .everyRuns(runs)
        }
        guard let seconds = duration(text, path: path, expected: expected, range: CloudKitSettings.deletionSweepSecondsRange, from: file) else {
            return nil
        }
        return .interval(seconds: seconds)
    }
}

extension CloudKitSettings {
    /// Every key of `source.cloudkit`, for `zonefeed config reference`; the reader takes no other.
    public static let reference = PipelineReference(
        component: "source cloudkit (ZoneFeedCloudKit)",
        keys: [
            .section(
                "source.cloudkit", default: "one source is required", "Reads the zone change feeds of a CloudKit container through CloudKit Web Services."),
            PipelineKey(
                "source.cloudkit.baseURL", takes: "an http:// or https:// URL", default: "https://api.apple-cloudkit.com",
                "Where CloudKit Web Services answer; a fake server's URL in tests."),
            PipelineKey(
                "source.cloudkit.container", takes: "a container identifier starting with iCloud.", default: "required",
                "The container, such as iCloud.com.example.notes."),
            .choice("source.cloudkit.environment", Environment.self, default: "production", "The container's environment."),
            .choice(
                "source.cloudkit.database", Database.self, default: "private",
                "The database: change feeds exist in the private and shared ones; the public one is read by query (docs/public-database.md)."),
            PipelineKey(
                "source.cloudkit.zones", takes: "'all' or a list of zone names such as [Notes, Archive]", default: "all",
                "The zones exported; `all` discovers them through the database's changes."),
            .integer(
                "source.cloudkit.resultsLimit", resultsLimitRange, default: 200,
                "Records asked for per page, and names per `records/lookup` request when a deletion sweep fetches records it found no row for."),
            PipelineKey(
                "source.cloudkit.queryLag", takes: "a time such as 30s, 5m or 1h (up to 24h)", default: "5m",
                "A zone read by query (_defaultZone) is read again from this long before its watermark each run: CloudKit's indexes lag."),
            PipelineKey(
                "source.cloudkit.deletionSweep", takes: "never, a time such as 24h (1m to 365d), or every: N runs", default: "24h",
                "How often a zone read by query lists its record names to tombstone deleted records (resultsLimit names a request)."),
            PipelineKey(
                "source.cloudkit.desiredKeys", takes: "a list of field names such as [title, body]", default: "every field",
                "Only these fields are fetched; each field recordTypes maps to a column must be among them."),
            .number(
                "source.cloudkit.timeoutSeconds", timeoutSecondsRange, unit: "seconds", default: 60,
                "One answer may take this long, from sending the request to its last byte."),
            .number(
                "source.cloudkit.idleTimeoutSeconds", idleTimeoutSecondsRange, unit: "seconds", default: 30,
                "An answer that sends nothing for this long is given up on."),
            .integer("source.cloudkit.maxAttempts", maxAttemptsRange, default: 8, "Tries of a throttled or failed request..."),
            .number(
                "source.cloudkit.retryBudgetSeconds", retryBudgetSecondsRange, unit: "seconds", default: 300,
                "...and no new try later than this after the first."),
            .number(
                "source.cloudkit.maxRetryAfterSeconds", maxRetryAfterSecondsRange, unit: "seconds", default: 300,
                "A server's retryAfter counts at most this much."),
            .integer("source.cloudkit.maxResponseBytes", maxResponseBytesRange, default: 32 * 1024 * 1024, "The largest answer read."),
            .integer("source.cloudkit.maxConcurrentRequests", maxConcurrentRequestsRange, default: 16, "Requests in flight at once, across zones."),
            .section("source.cloudkit.tls", "Certificates trusted besides the system's."),
            PipelineKey(
                "source.cloudkit.tls.caFile", takes: "the path of a PEM file of CA certificates",
                "CA certificates trusted besides the system's (a TLS-inspecting proxy's); certificates are always verified."),
            .section("source.cloudkit.auth", default: "required", "How requests are authenticated (docs/cloudkit.md)."),
            PipelineKey(
                "source.cloudkit.auth.apiToken", takes: "a token; ${VAR} reads the environment", default: "required, unless serverKey",
                "The container's API token."),
            PipelineKey(
                "source.cloudkit.auth.webAuthToken", takes: "a token; ${VAR} reads the environment", default: "the stored sign-in (zonefeed login)",
                "A user's web auth token; a newer one stored by a sign-in or a run wins."),
            PipelineKey(
                "source.cloudkit.auth.webAuthTokenFile", takes: "a file path", default: ".zonefeed/<pipeline>.web-auth-token",
                "Where rotated web auth tokens are kept between runs (mode 0600)."),
            .choice(
                "source.cloudkit.auth.webAuthTokenStore", TokenStore.self, default: "file",
                "Where rotated tokens are kept: the file, or the destination's zonefeed_web_auth_tokens table (for pods)."),
            .section("source.cloudkit.auth.serverKey", "Server-to-server signing, for the public database (zonefeed key create)."),
            PipelineKey(
                "source.cloudkit.auth.serverKey.keyID", takes: "the key ID CloudKit Dashboard shows; ${VAR} reads the environment",
                default: "required", "The key's ID."),
            PipelineKey(
                "source.cloudkit.auth.serverKey.privateKeyFile", takes: "the path of a PEM private key file (mode 0600)",
                "The P-256 private key, from a file..."),
            PipelineKey(
                "source.cloudkit.auth.serverKey.privateKey", takes: "PEM text; ${VAR} reads the environment",
                "...or from a variable (a Kubernetes secret)."),
        ])
}
