import CloudKitWebServices
import ZoneFeed

extension CloudKitSettings: SourceConfiguration {
    public static let key = "cloudkit"
    /// The longest token taken from the file or its variables.
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
        let database = file.choice(
            CloudKitSettings.Database.self, "database", in: section,
            explanations: [
                "public":
                    "the public database has no change feeds: zone change feeds exist only in the private and shared databases (expected private or shared)"
            ]
        )
        let zones = readZones(in: section, from: file)
        let resultsLimit = file.integer("resultsLimit", in: section, range: CloudKitSettings.resultsLimitRange)
        let desiredKeys = file.stringList("desiredKeys", in: section, expected: "a list of field names such as [title, body]")
        let timeout = file.number("timeoutSeconds", in: section, range: CloudKitSettings.timeoutSecondsRange, unit: "seconds")
        let maxAttempts = file.integer("maxAttempts", in: section, range: CloudKitSettings.maxAttemptsRange)
        let retryBudget = file.number("retryBudgetSeconds", in: section, range: CloudKitSettings.retryBudgetSecondsRange, unit: "seconds")
        let maxConcurrentRequests = file.integer("maxConcurrentRequests", in: section, range: CloudKitSettings.maxConcurrentRequestsRange)
        let idleTimeout = file.number("idleTimeoutSeconds", in: section, range: CloudKitSettings.idleTimeoutSecondsRange, unit: "seconds")
        let maxRetryAfter = file.number("maxRetryAfterSeconds", in: section, range: CloudKitSettings.maxRetryAfterSecondsRange, unit: "seconds")
        let maxResponseBytes = file.integer("maxResponseBytes", in: section, range: CloudKitSettings.maxResponseBytesRange)
        let auth = readAuth(in: section, from: file)
        let tlsCAFile = readTLS(in: section, from: file)
        guard file.diagnostics.count == reported, let container, let auth else { return nil }

        var settings = CloudKitSettings(container: container, auth: auth)
        if let baseURL { settings.baseURL = baseURL }
        if let environment { settings.environment = environment }
        if let database { settings.database = database }
        if let zones { settings.zones = zones }
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
        if settings.auth.webAuthTokenFile == nil, settings.auth.webAuthTokenStore == .file, let pipelineName {
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
            _ = try TLSTrust(caFile: value)
        } catch {
            file.report("\(section.path(of: "caFile")): \(error)", at: section["caFile"]?.valuePosition ?? section.position)
            return nil
        }
        return value
    }

    static func readAuth(in cloudKit: PipelineSection, from file: PipelineFileReader) -> CloudKitSettings.Auth? {
        let allowed = reference.keys.keys(in: "source.cloudkit.auth")
        guard let section = file.subsection("auth", in: cloudKit, allowed: allowed, required: true) else { return nil }
        let reported = file.diagnostics.count

        let apiToken = file.secret("apiToken", in: section, emptyMeansAbsent: false)
        // An empty web auth token (`${CLOUDKIT_WEB_AUTH_TOKEN:-}`) leaves it to webAuthTokenFile.
        let webAuthToken = file.secret("webAuthToken", in: section, emptyMeansAbsent: true)
        // A token is a few hundred bytes; megabytes are a variable set to the wrong thing, and
        // would go out in every request's address (never quoted: it may still be a secret).
        for (key, secret) in [("apiToken", apiToken), ("webAuthToken", webAuthToken)] {
            guard let secret, secret.value.utf8.count > Self.maxTokenBytes, let position = section[key]?.valuePosition else { continue }
            file.report(
                "\(section.path(of: key)) is \(secret.value.utf8.count) bytes long, and a token is a few hundred (at most \(Self.maxTokenBytes)): "
                    + "check what it is set from", at: position)
        }
        let webAuthTokenFile = file.nonEmptyText("webAuthTokenFile", in: section, expected: "a file path")
        let webAuthTokenStore = file.choice(CloudKitSettings.TokenStore.self, "webAuthTokenStore", in: section)
        let serverKeyID = file.nonEmptyText("serverKeyID", in: section, expected: "a key ID from CloudKit Dashboard")
        let serverPrivateKeyFile = file.nonEmptyText("serverPrivateKeyFile", in: section, expected: "the path of a PEM private key file")

        // Only a key that is not there at all is "missing"; one that is there but unusable (an
        // unset variable, say) was reported where it is.
        if section["apiToken"] == nil && section["serverKeyID"] == nil {
            file.report(
                "missing required key 'apiToken' in \(section.path) (or sign requests server-to-server with serverKeyID and serverPrivateKeyFile)",
                at: section.position
            )
        }
        if let keyID = section["serverKeyID"], section["serverPrivateKeyFile"] == nil {
            file.report("serverKeyID needs serverPrivateKeyFile in \(section.path): the PEM file of the key it names", at: keyID.keyPosition)
        }
        if let keyFile = section["serverPrivateKeyFile"], section["serverKeyID"] == nil {
            file.report("serverPrivateKeyFile needs serverKeyID in \(section.path): the key's ID from CloudKit Dashboard", at: keyFile.keyPosition)
        }
        if webAuthTokenStore == .database, let tokenFile = section["webAuthTokenFile"] {
            file.report(
                "webAuthTokenFile names a file, but webAuthTokenStore is database in \(section.path): the tokens are kept in one place; remove one",
                at: tokenFile.keyPosition)
        }
        guard file.diagnostics.count == reported else { return nil }
        var auth = CloudKitSettings.Auth(
            apiToken: apiToken, webAuthToken: webAuthToken, webAuthTokenFile: webAuthTokenFile,
            serverKeyID: serverKeyID, serverPrivateKeyFile: serverPrivateKeyFile
        )
        if let webAuthTokenStore { auth.webAuthTokenStore = webAuthTokenStore }
        return auth
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
            .choice("source.cloudkit.database", Database.self, default: "private", "The database: change feeds exist only in the private and shared ones."),
            PipelineKey(
                "source.cloudkit.zones", takes: "'all' or a list of zone names such as [Notes, Archive]", default: "all",
                "The zones exported; `all` discovers them through the database's changes."),
            .integer("source.cloudkit.resultsLimit", resultsLimitRange, default: 200, "Records asked for per page."),
            PipelineKey(
                "source.cloudkit.desiredKeys", takes: "a list of field names such as [title, body]", default: "every field",
                "Only these fields are fetched."),
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
                "source.cloudkit.auth.apiToken", takes: "a token; ${VAR} reads the environment", default: "required, unless serverKeyID",
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
            PipelineKey(
                "source.cloudkit.auth.serverKeyID", takes: "a key ID from CloudKit Dashboard", "Server-to-server signing: the key's ID."),
            PipelineKey(
                "source.cloudkit.auth.serverPrivateKeyFile", takes: "the path of a PEM private key file",
                "Server-to-server signing: the key's PEM file."),
        ])
}
