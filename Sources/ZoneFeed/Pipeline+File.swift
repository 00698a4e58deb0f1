import Foundation
import Yams

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension Pipeline {
    /// Reads and validates a pipeline file. Every problem in it is reported at once, each with its
    /// `file:line:column`, as one `PipelineFileError`; so is a file that cannot be read.
    ///
    /// `${VAR}` in a value is replaced from `environment` before the value is interpreted.
    public static func load(
        path: String, environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> Pipeline {
        let text: String
        switch readTextFile(atPath: path) {
        case .success(let contents): text = contents
        case .failure(let failure):
            throw PipelineFileError(diagnostics: [
                PipelineDiagnostic(file: path, line: 0, column: 0, message: "cannot read pipeline file: \(failure.reason)")
            ])
        }
        return try parse(yaml: text, filePath: path, environment: environment)
    }

    /// Validates a pipeline file's text; `filePath` is only used to name it in diagnostics.
    public static func parse(yaml: String, filePath: String, environment: [String: String]) throws -> Pipeline {
        var reader = PipelineFileReader(yaml: yaml, filePath: filePath, environment: environment)
        let root: Node?
        do {
            root = try Yams.compose(yaml: yaml)
        } catch {
            reader.reportYAMLError(error)
            throw PipelineFileError(diagnostics: reader.sortedDiagnostics)
        }
        let pipeline = reader.readPipeline(root)
        guard let pipeline, reader.sortedDiagnostics.isEmpty else {
            throw PipelineFileError(diagnostics: reader.sortedDiagnostics)
        }
        return pipeline
    }
}

// MARK: - The plan

extension Pipeline {
    /// What a run of this pipeline would do, for `zonefeed validate`: the source, the
    /// destination, each record type's table and columns, and the policies. Tokens and passwords
    /// are shown as `<redacted>`.
    public var planDescription: String {
        var out: [String] = ["pipeline \(name) (\(filePath))", ""]
        func row(_ label: String, _ value: String) {
            out.append("  " + (label + ":").padding(toLength: 20, withPad: " ", startingAt: 0) + value)
        }

        switch source {
        case .cloudKit(let cloudKit):
            out.append("source: CloudKit Web Services")
            row("baseURL", cloudKit.baseURL)
            row("container", cloudKit.container)
            row("environment", cloudKit.environment.rawValue)
            row("database", cloudKit.database.rawValue)
            switch cloudKit.zones {
            case .all: row("zones", "all (discovered through the database change feed)")
            case .named(let names): row("zones", names.joined(separator: ", "))
            }
            row("resultsLimit", "\(cloudKit.resultsLimit) records per request")
            row("desiredKeys", cloudKit.desiredKeys.map { $0.isEmpty ? "none" : $0.joined(separator: ", ") } ?? "all fields")
            row("requests", "timeout \(seconds(cloudKit.timeoutSeconds)), at most \(cloudKit.maxAttempts) attempts, \(seconds(cloudKit.retryBudgetSeconds)) of retry waits")
            row("maxConcurrentRequests", "\(cloudKit.maxConcurrentRequests) requests in flight at most (fewer while throttled; one if the server accepts only the newest token)")
            let auth = cloudKit.auth
            var kinds: [String] = []
            if auth.apiToken != nil { kinds.append("apiToken <redacted>") }
            if auth.webAuthToken != nil { kinds.append("webAuthToken <redacted>") }
            if let file = auth.webAuthTokenFile {
                kinds.append("webAuthTokenFile \(file)" + (auth.webAuthTokenFileIsDefault ? " (the default for this pipeline)" : ""))
            }
            if auth.serverKeyID != nil { kinds.append("serverKeyID <redacted>") }
            if let file = auth.serverPrivateKeyFile { kinds.append("serverPrivateKeyFile \(file)") }
            row("auth", kinds.joined(separator: ", "))
        case .fake(let fake):
            out.append("source: fake (deterministic generator)")
            row("seed", "\(fake.seed)")
            row("zones", "\(fake.zones)")
            row("recordsPerZone", "\(fake.recordsPerZone)")
            row("pageSize", "\(fake.pageSize)")
            row("badRecordEvery", fake.badRecordEvery.map { "1 in every \($0) created records" } ?? "never")
            row("owner", fake.owner)
            row("churn", fake.churn ? "updates, deletions and re-creations" : "none (every entry creates a record)")
        }

        out.append("")
        out.append("destination: PostgreSQL")
        row("url", destination.isEmbedded ? "embedded (a private cluster under .zonefeed/postgres)" : redactConnectionString(destination.url.value))
        row("schema", destination.schema)
        switch destination.deletes {
        case .tombstone: row("deletes", "tombstone (a deleted record keeps its row, with deleted_at set)")
        case .hard: row("deletes", "hard (a deleted record's row is deleted)")
        }
        row("commitEvery", "\(destination.commitEvery) records per transaction (whole pages only)")
        row("parallelZones", destination.parallelZones == 1 ? "1 zone at a time" : "up to \(destination.parallelZones) zones at once, each on its own connection")

        out.append("")
        if recordTypes.isEmpty {
            let fate = unknownRecordTypes == .skip ? "every record is skipped" : "every record goes to zonefeed_rejects"
            out.append("record types: none mapped (so \(fate): unknownRecordTypes is \(unknownRecordTypes.rawValue))")
        } else {
            out.append("record types (every table also has the columns \(systemColumns.filter { $0 != "fields" }.joined(separator: ", "))):")
        }
        for mapping in recordTypes {
            let table = "\(destination.schema).\(mapping.table)"
            out.append("  \(mapping.recordType) -> table \(table), view \(table)_live (its rows whose deleted_at is null)")
            let columnWidth = max(mapping.fields.map(\.column.count).max() ?? 0, "fields".count) + 2
            let typeWidth = max(mapping.fields.map(\.type.rawValue.count).max() ?? 0, "jsonb".count) + 2
            func column(_ name: String, _ type: String, _ note: String) {
                out.append(
                    "    " + name.padding(toLength: columnWidth, withPad: " ", startingAt: 0)
                        + (note.isEmpty ? type : type.padding(toLength: typeWidth, withPad: " ", startingAt: 0) + note)
                )
            }
            for field in mapping.fields {
                column(field.column, field.type.rawValue, field.column == field.field ? "" : "(field \(field.field))")
            }
            column("fields", "jsonb", unmappedFields == .keep ? "(the fields not mapped to a column)" : "(null: unmappedFields is drop)")
        }

        out.append("")
        out.append("policies:")
        switch unmappedFields {
        case .keep: row("unmappedFields", "keep (in the fields jsonb column)")
        case .drop: row("unmappedFields", "drop")
        }
        switch unknownRecordTypes {
        case .skip: row("unknownRecordTypes", "skip (records of other types are not written)")
        case .reject: row("unknownRecordTypes", "reject (records of other types go to zonefeed_rejects)")
        }
        switch onBadRecord {
        case .reject: row("onBadRecord", "reject (to zonefeed_rejects; the run goes on)")
        case .fail: row("onBadRecord", "fail (the run stops)")
        }
        return out.joined(separator: "\n")
    }
}

private func seconds(_ value: Double) -> String {
    value == value.rounded() && abs(value) < 1e15 ? "\(Int(value)) s" : "\(value) s"
}

// MARK: - Reading the file

private struct ReadFailure: Error {
    var reason: String
}

/// Reads with POSIX calls rather than Foundation so that the reason a read failed is `strerror`'s
/// plain sentence ("No such file or directory"), the one users know from every other tool.
private func readTextFile(atPath path: String) -> Result<String, ReadFailure> {
    let fd = open(path, O_RDONLY)
    guard fd >= 0 else { return .failure(ReadFailure(reason: String(cString: strerror(errno)))) }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 64 * 1024)
    while true {
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if count < 0 {
            if errno == EINTR { continue }
            return .failure(ReadFailure(reason: String(cString: strerror(errno))))
        }
        if count == 0 { break }
        bytes.append(contentsOf: buffer[0..<count])
    }
    guard let text = String(bytes: bytes, encoding: .utf8) else {
        return .failure(ReadFailure(reason: "the file is not UTF-8 text"))
    }
    return .success(text)
}

// MARK: - The reader

/// A place in the file, 1-based like Yams' `Mark` (whose initializer is not public).
private struct Position {
    var line: Int
    var column: Int

    init(line: Int, column: Int) {
        self.line = line
        self.column = column
    }

    init(_ mark: Mark?) {
        self.init(line: mark?.line ?? 0, column: mark?.column ?? 0)
    }
}

/// A value after `${VAR}` substitution, with where it was written.
private struct Value {
    var text: String
    var position: Position
}

/// One `key: value` of a mapping.
private struct Entry {
    var key: String
    var keyPosition: Position
    var value: Node
    var valuePosition: Position { Position(value.mark) }
}

/// A mapping whose keys were checked against the ones allowed there.
private struct Section {
    /// `source.cloudkit`; empty at the top level.
    var path: String
    /// Where a missing key is reported: the key that introduces this mapping.
    var position: Position
    var entries: [String: Entry] = [:]

    subscript(key: String) -> Entry? { entries[key] }

    func path(of key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    /// "in source.cloudkit", or "at the top level".
    var whereabouts: String { path.isEmpty ? "at the top level" : "in \(path)" }
}

/// Walks the composed YAML tree by hand (rather than through Codable) so that every problem is
/// reported at the node it concerns, and collects them all instead of stopping at the first.
private struct PipelineFileReader {
    let filePath: String
    let environment: [String: String]
    /// The file's lines, to find the column of a `${` inside a scalar.
    let lines: [[Unicode.Scalar]]
    let yaml: String
    private(set) var diagnostics: [PipelineDiagnostic] = []

    init(yaml: String, filePath: String, environment: [String: String]) {
        self.yaml = yaml
        self.filePath = filePath
        self.environment = environment
        self.lines = yaml.unicodeScalars.split(separator: "\n", omittingEmptySubsequences: false).map(Array.init)
    }

    var sortedDiagnostics: [PipelineDiagnostic] {
        diagnostics.enumerated()
            .sorted { ($0.element.line, $0.element.column, $0.offset) < ($1.element.line, $1.element.column, $1.offset) }
            .map(\.element)
    }

    mutating func report(_ message: String, at position: Position) {
        diagnostics.append(
            PipelineDiagnostic(file: filePath, line: position.line, column: position.column, message: message)
        )
    }

    // MARK: YAML syntax

    mutating func reportYAMLError(_ error: any Error) {
        guard let error = error as? YamlError else {
            report("invalid YAML: \(error)", at: Position(line: 1, column: 1))
            return
        }
        // Only libyaml's problem and context sentences are used: Yams' own descriptions quote
        // the offending lines, and those may hold a secret.
        func sentence(_ problem: String, _ context: YamlError.Context?) -> String {
            guard let context else { return "invalid YAML: \(problem)" }
            return "invalid YAML: \(problem) (\(context.text) at line \(context.mark.line), column \(context.mark.column))"
        }
        switch error {
        case .scanner(let context, let problem, let mark, _),
            .parser(let context, let problem, let mark, _),
            .composer(let context, let problem, let mark, _):
            report(sentence(problem, context), at: Position(mark))
        case .reader(let problem, let offset, _, _):
            report("invalid YAML: \(problem)", at: position(ofCharacterOffset: offset ?? 0))
        case .duplicatedKeysInMapping(let duplicates, let context):
            let keys = duplicates.map { "'\($0)'" }.joined(separator: ", ")
            let subject = duplicates.count == 1 ? "key \(keys) appears" : "keys \(keys) appear"
            report("\(subject) more than once in the same mapping", at: Position(context.mark))
        default:
            report("invalid YAML: \(error)", at: Position(line: 1, column: 1))
        }
    }

    private func position(ofCharacterOffset offset: Int) -> Position {
        var line = 1
        var column = 1
        for character in yaml.prefix(offset) {
            if character.isNewline {
                line += 1
                column = 1
            } else {
                column += character.unicodeScalars.count
            }
        }
        return Position(line: line, column: column)
    }

    // MARK: The top level

    mutating func readPipeline(_ root: Node?) -> Pipeline? {
        guard let root else {
            report(
                "the pipeline file is empty: it needs at least 'pipeline', 'source' and 'destination'",
                at: Position(line: 1, column: 1)
            )
            return nil
        }
        let allowed = [
            "pipeline", "source", "destination", "recordTypes", "unmappedFields", "unknownRecordTypes", "onBadRecord",
        ]
        guard let top = section(root, path: "", position: Position(root.mark), allowed: allowed)
        else { return nil }

        let name = readName(in: top)
        var source = readSource(in: top)
        if case .cloudKit(var cloudKit)? = source, cloudKit.auth.webAuthTokenFile == nil, let name {
            // Tokens rotate with every request: a run that did not keep the newest could not
            // start again after a crash.
            cloudKit.auth.webAuthTokenFile = ".zonefeed/\(name).web-auth-token"
            cloudKit.auth.webAuthTokenFileIsDefault = true
            source = .cloudKit(cloudKit)
        }
        let destination = readDestination(in: top, pipelineName: name)
        let recordTypes = readRecordTypes(in: top)
        let unmappedFields = choice(Pipeline.UnmappedFields.self, "unmappedFields", in: top)
        let unknownRecordTypes = choice(Pipeline.UnknownRecordTypes.self, "unknownRecordTypes", in: top)
        let onBadRecord = choice(Pipeline.OnBadRecord.self, "onBadRecord", in: top)

        guard let name, let source, let destination, let recordTypes else { return nil }
        return Pipeline(
            name: name, source: source, destination: destination, recordTypes: recordTypes,
            unmappedFields: unmappedFields ?? .keep, unknownRecordTypes: unknownRecordTypes ?? .skip,
            onBadRecord: onBadRecord ?? .reject, filePath: filePath
        )
    }

    mutating func readName(in top: Section) -> String? {
        guard let value = text("pipeline", in: top, expected: "a name such as notes", required: true) else { return nil }
        let allowed = value.text.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || "_-.".unicodeScalars.contains($0)
        }
        if value.text.isEmpty {
            report("the pipeline name is empty", at: value.position)
            return nil
        }
        guard allowed else {
            report(
                "pipeline name '\(value.text)' may hold only ASCII letters, digits, '_', '-' and '.'",
                at: value.position
            )
            return nil
        }
        return value.text
    }

    // MARK: source

    mutating func readSource(in top: Section) -> SourceSettings? {
        guard let source = subsection("source", in: top, allowed: ["cloudkit", "fake"], required: true) else { return nil }
        let cloudKit = source["cloudkit"]
        let fake = source["fake"]
        if cloudKit == nil && fake == nil {
            report("source needs one of 'cloudkit' or 'fake'", at: source.position)
            return nil
        }
        if let cloudKit, let fake {
            let second = cloudKit.keyPosition.line > fake.keyPosition.line ? cloudKit : fake
            report("source has both 'cloudkit' and 'fake': a pipeline reads from exactly one source", at: second.keyPosition)
            // Both are still checked, so that fixing the file takes one round.
            _ = readCloudKit(in: source)
            _ = readFake(in: source)
            return nil
        }
        if cloudKit != nil { return readCloudKit(in: source).map(SourceSettings.cloudKit) }
        return readFake(in: source).map(SourceSettings.fake)
    }

    mutating func readCloudKit(in source: Section) -> CloudKitSettings? {
        let allowed = [
            "baseURL", "container", "environment", "database", "zones", "resultsLimit", "desiredKeys",
            "timeoutSeconds", "maxAttempts", "retryBudgetSeconds", "maxConcurrentRequests", "auth",
        ]
        guard let section = subsection("cloudkit", in: source, allowed: allowed, required: true) else { return nil }
        let reported = diagnostics.count

        var baseURL: String?
        if let value = text("baseURL", in: section, expected: "an http:// or https:// URL") {
            if value.text.hasPrefix("https://") || value.text.hasPrefix("http://") {
                // The client appends paths that start with '/'.
                var url = value.text
                while url.hasSuffix("/") { url.removeLast() }
                baseURL = url
            } else {
                report("baseURL '\(value.text)' must start with https:// (or http:// for a local fake server)", at: value.position)
            }
        }

        var container: String?
        if let value = text("container", in: section, expected: "a container identifier such as iCloud.com.example.notes", required: true) {
            if value.text.hasPrefix("iCloud."), value.text.count > "iCloud.".count {
                container = value.text
            } else {
                report(
                    "container '\(value.text)' must be a CloudKit container identifier starting with 'iCloud.', such as iCloud.com.example.notes",
                    at: value.position
                )
            }
        }

        let environment = choice(CloudKitSettings.Environment.self, "environment", in: section)
        let database = choice(
            CloudKitSettings.Database.self, "database", in: section,
            explanations: [
                "public": "the public database has no change feeds: zone change feeds exist only in the private and shared databases (expected private or shared)"
            ]
        )
        let zones = readZones(in: section)
        let resultsLimit = integer("resultsLimit", in: section, range: 1...200)
        let desiredKeys = stringList("desiredKeys", in: section, expected: "a list of field names such as [title, body]")
        let timeout = number("timeoutSeconds", in: section, minimum: 0, inclusive: false)
        let maxAttempts = integer("maxAttempts", in: section, range: 1...Int.max)
        let retryBudget = number("retryBudgetSeconds", in: section, minimum: 0, inclusive: true)
        let maxConcurrentRequests = integer("maxConcurrentRequests", in: section, range: 1...256)
        let auth = readAuth(in: section)
        guard diagnostics.count == reported, let container, let auth else { return nil }

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
        return settings
    }

    /// `all`, or a non-empty list of zone names.
    mutating func readZones(in section: Section) -> ZoneSelection? {
        guard let entry = section["zones"], !isNull(entry.value) else { return nil }
        let path = section.path(of: "zones")
        let expected = "'all' or a list of zone names such as [Notes, Archive]"
        if case .scalar = entry.value {
            guard let value = scalarValue(entry.value, path: path, expected: expected) else { return nil }
            if value.text == "all" { return .all }
            report("\(path) must be \(expected), not '\(value.text)' (did you mean [\(value.text)]?)", at: value.position)
            return nil
        }
        guard let names = stringList("zones", in: section, expected: expected) else { return nil }
        guard !names.isEmpty else {
            report("\(path) is an empty list: name at least one zone, or write 'zones: all'", at: entry.valuePosition)
            return nil
        }
        var seen: Set<String> = []
        var failed = false
        for name in names {
            if name.isEmpty {
                report("a zone name in \(path) is empty", at: entry.valuePosition)
                failed = true
            } else if !seen.insert(name).inserted {
                report("zone '\(name)' is listed twice in \(path)", at: entry.valuePosition)
                failed = true
            }
        }
        return failed ? nil : .named(names)
    }

    mutating func readAuth(in cloudKit: Section) -> CloudKitSettings.Auth? {
        let allowed = ["apiToken", "webAuthToken", "webAuthTokenFile", "serverKeyID", "serverPrivateKeyFile"]
        guard let section = subsection("auth", in: cloudKit, allowed: allowed, required: true) else { return nil }
        let reported = diagnostics.count

        let apiToken = secret("apiToken", in: section, emptyMeansAbsent: false)
        // An empty web auth token (`${CLOUDKIT_WEB_AUTH_TOKEN:-}`) leaves it to webAuthTokenFile.
        let webAuthToken = secret("webAuthToken", in: section, emptyMeansAbsent: true)
        let webAuthTokenFile = nonEmptyText("webAuthTokenFile", in: section, expected: "a file path")
        let serverKeyID = nonEmptyText("serverKeyID", in: section, expected: "a key ID from CloudKit Dashboard")
        let serverPrivateKeyFile = nonEmptyText("serverPrivateKeyFile", in: section, expected: "the path of a PEM private key file")

        // Only a key that is not there at all is "missing"; one that is there but unusable (an
        // unset variable, say) was reported where it is.
        if section["apiToken"] == nil && section["serverKeyID"] == nil {
            report(
                "missing required key 'apiToken' in \(section.path) (or sign requests server-to-server with serverKeyID and serverPrivateKeyFile)",
                at: section.position
            )
        }
        if let keyID = section["serverKeyID"], section["serverPrivateKeyFile"] == nil {
            report("serverKeyID needs serverPrivateKeyFile in \(section.path): the PEM file of the key it names", at: keyID.keyPosition)
        }
        if let keyFile = section["serverPrivateKeyFile"], section["serverKeyID"] == nil {
            report("serverPrivateKeyFile needs serverKeyID in \(section.path): the key's ID from CloudKit Dashboard", at: keyFile.keyPosition)
        }
        guard diagnostics.count == reported else { return nil }
        return CloudKitSettings.Auth(
            apiToken: apiToken, webAuthToken: webAuthToken, webAuthTokenFile: webAuthTokenFile,
            serverKeyID: serverKeyID, serverPrivateKeyFile: serverPrivateKeyFile
        )
    }

    mutating func readFake(in source: Section) -> FakeSettings? {
        let allowed = ["seed", "zones", "recordsPerZone", "pageSize", "badRecordEvery", "owner", "churn"]
        guard let section = subsection("fake", in: source, allowed: allowed, required: true) else { return nil }
        let reported = diagnostics.count
        var settings = FakeSettings()

        if let value = text("seed", in: section, expected: "a whole number of 0 or more") {
            if let seed = parseUInt64(value.text) {
                settings.seed = seed
            } else {
                report("\(section.path(of: "seed")) must be a whole number from 0 to \(UInt64.max), not '\(value.text)'", at: value.position)
            }
        }
        if let zones = integer("zones", in: section, range: 1...1000) { settings.zones = zones }
        if let records = integer("recordsPerZone", in: section, range: 0...Int.max) { settings.recordsPerZone = records }
        if let pageSize = integer("pageSize", in: section, range: 1...200) { settings.pageSize = pageSize }
        if let every = integer("badRecordEvery", in: section, range: 1...Int.max) { settings.badRecordEvery = every }
        if let owner = nonEmptyText("owner", in: section, expected: "a user record name") { settings.owner = owner }
        if let churn = boolean("churn", in: section) { settings.churn = churn }
        return diagnostics.count == reported ? settings : nil
    }

    // MARK: destination

    mutating func readDestination(in top: Section, pipelineName: String?) -> DestinationSettings? {
        let allowed = ["url", "schema", "deletes", "commitEvery", "parallelZones"]
        guard let section = subsection("destination", in: top, allowed: allowed, required: true) else { return nil }
        let reported = diagnostics.count

        let url = secret("url", in: section, emptyMeansAbsent: false, required: true)
        if let url, let problem = connectionStringProblem(url.value) {
            report("\(section.path(of: "url")) \(problem)", at: section["url"]!.valuePosition)
        }

        var schema: String?
        if let value = text("schema", in: section, expected: "a schema name") {
            if checkIdentifier(value.text, kind: "schema", at: value.position) {
                if value.text.lowercased().hasPrefix("pg_") {
                    report("schema '\(value.text)' starts with 'pg_', which PostgreSQL reserves for its own schemas", at: value.position)
                } else {
                    schema = value.text
                }
            }
        } else if section["schema"] == nil || isNull(section["schema"]!.value), let pipelineName {
            // The default schema is the pipeline name, which must then follow a schema's rules.
            let at = top["pipeline"]?.valuePosition ?? section.position
            if pipelineName.utf8.count > 63 {
                report(
                    "the pipeline name is \(pipelineName.utf8.count) bytes long, too long for the schema it names by default (at most 63 bytes): set destination.schema",
                    at: at
                )
            } else if pipelineName.lowercased().hasPrefix("pg_") {
                report(
                    "the pipeline name starts with 'pg_', which PostgreSQL reserves for its own schemas: set destination.schema",
                    at: at
                )
            } else {
                schema = pipelineName
            }
        }

        let deletes = choice(DestinationSettings.DeleteMode.self, "deletes", in: section)
        let commitEvery = integer("commitEvery", in: section, range: 1...Int.max)
        let parallelZones = integer("parallelZones", in: section, range: 1...16)
        guard diagnostics.count == reported, let url, let schema else { return nil }
        return DestinationSettings(
            url: url, schema: schema, deletes: deletes ?? .tombstone, commitEvery: commitEvery ?? 5_000,
            parallelZones: parallelZones ?? DestinationSettings.defaultParallelZones)
    }

    /// Why libpq would not take this connection string; the sentence never quotes the string.
    func connectionStringProblem(_ url: String) -> String? {
        // Not trimmed: `isEmbedded` compares the exact word, so " embedded" must not pass here.
        let trimmed = url
        if trimmed == "embedded" { return nil }
        let lowered = trimmed.lowercased()
        if lowered.hasPrefix("postgresql://") || lowered.hasPrefix("postgres://") { return nil }
        if trimmed.isEmpty {
            return "is empty: write 'embedded', a postgresql:// URI or a key=value connection string"
        }
        if trimmed.contains("=") && !trimmed.contains("://") {
            if let failure = ConninfoParser.parse(trimmed).failure {
                return "is not a valid key=value connection string: \(failure.problem)"
            }
            return nil
        }
        var sentence = "must be 'embedded', a postgresql:// URI or a key=value connection string such as 'host=localhost dbname=app'"
        if editDistance(lowered, "embedded") <= 2 { sentence += " (did you mean 'embedded'?)" }
        return sentence
    }

    // MARK: recordTypes

    mutating func readRecordTypes(in top: Section) -> [RecordTypeMapping]? {
        guard let entry = top["recordTypes"], !isNull(entry.value) else { return [] }
        guard let pairs = entries(of: entry.value, path: "recordTypes", what: "a mapping of record type names to tables")
        else { return nil }

        var mappings: [RecordTypeMapping] = []
        var failed = false
        // Lower-cased, because an unquoted identifier folds to lower case in PostgreSQL.
        var tableOwners: [String: String] = [:]
        for recordType in pairs {
            guard let mapping = readRecordType(recordType) else {
                failed = true
                continue
            }
            let table = mapping.table
            let at = table.position
            if let owner = tableOwners[table.name.lowercased()] {
                report("table '\(table.name)' of record type \(recordType.key) is already used by record type \(owner)", at: at)
                failed = true
                continue
            }
            tableOwners[table.name.lowercased()] = recordType.key
            mappings.append(mapping.mapping)
        }
        return failed ? nil : mappings
    }

    mutating func readRecordType(_ entry: Entry) -> (mapping: RecordTypeMapping, table: (name: String, position: Position))? {
        let recordType = entry.key
        let path = "recordTypes.\(recordType)"
        if recordType.isEmpty {
            report("a record type name in recordTypes is empty", at: entry.keyPosition)
            return nil
        }
        guard let section = section(entry.value, path: path, position: entry.keyPosition, allowed: ["table", "fields"])
        else { return nil }
        let reported = diagnostics.count

        var table = recordType.snakeCased
        var tablePosition = entry.keyPosition
        if let value = text("table", in: section, expected: "a table name") {
            table = value.text
            tablePosition = value.position
        }
        if diagnostics.count == reported {
            // The view `<table>_live` must fit in PostgreSQL's 63 bytes too.
            let limit = 63 - "_live".utf8.count
            let why = "at most \(limit) bytes, so that its view \(table)_live stays within PostgreSQL's 63"
            if !checkIdentifier(table, kind: "table", owner: "of record type \(recordType)", at: tablePosition, maxBytes: limit, why: why) {
                // Reported.
            } else if table.lowercased().hasPrefix("zonefeed_") {
                report("table '\(table)' of record type \(recordType) starts with 'zonefeed_', which is reserved for zonefeed's own tables", at: tablePosition)
            } else if table.lowercased().hasSuffix("_live") {
                report("table '\(table)' of record type \(recordType) ends with '_live', which is reserved for the views of live rows", at: tablePosition)
            }
        }

        let fields = readFields(in: section, recordType: recordType, table: table)
        guard diagnostics.count == reported, let fields else { return nil }
        return (RecordTypeMapping(recordType: recordType, table: table, fields: fields), (table, tablePosition))
    }

    mutating func readFields(in recordType: Section, recordType name: String, table: String) -> [FieldMapping]? {
        guard let entry = recordType["fields"], !isNull(entry.value) else { return [] }
        let path = recordType.path(of: "fields")
        guard let pairs = entries(of: entry.value, path: path, what: "a mapping of field names to column types") else {
            return nil
        }
        var fields: [FieldMapping] = []
        var failed = false
        var columnOwners: [String: String] = [:]
        let system = Set(systemColumns)
        for field in pairs {
            if field.key.isEmpty {
                report("a field name in \(path) is empty", at: field.keyPosition)
                failed = true
                continue
            }
            guard let (mapping, columnPosition) = readField(field, path: "\(path).\(field.key)") else {
                failed = true
                continue
            }
            let column = mapping.column
            if !checkIdentifier(column, kind: "column", owner: "of field \(field.key)", at: columnPosition) {
                failed = true
                continue
            }
            if system.contains(column.lowercased()) {
                report(
                    "column '\(column)' of field \(field.key) clashes with the system column \(column.lowercased()) that every record table has: map the field to another column with { column: ..., type: ... }",
                    at: columnPosition
                )
                failed = true
                continue
            }
            if let owner = columnOwners[column.lowercased()] {
                report("column '\(column)' of field \(field.key) is already used by field \(owner) in table \(table)", at: columnPosition)
                failed = true
                continue
            }
            columnOwners[column.lowercased()] = field.key
            fields.append(mapping)
        }
        return failed ? nil : fields
    }

    /// `title: text`, or `body: { column: body_text, type: text }`.
    mutating func readField(_ entry: Entry, path: String) -> (FieldMapping, columnPosition: Position)? {
        let field = entry.key
        let expected = "a column type such as text, or a mapping { column: ..., type: ... }"
        switch entry.value {
        case _ where isNull(entry.value):
            report("field \(field) has no type: write '\(field): text' or '\(field): { column: ..., type: ... }'", at: entry.keyPosition)
            return nil
        case .scalar:
            guard let typeName = scalarValue(entry.value, path: path, expected: expected),
                let type = columnType(typeName, field: field)
            else { return nil }
            return (FieldMapping(field: field, column: field.snakeCased, type: type), entry.keyPosition)
        case .mapping:
            guard let section = section(entry.value, path: path, position: entry.keyPosition, allowed: ["column", "type"])
            else { return nil }
            let reported = diagnostics.count
            let column = text("column", in: section, expected: "a column name")
            guard let typeName = text("type", in: section, expected: "a column type such as text", required: true),
                let type = columnType(typeName, field: field), diagnostics.count == reported
            else { return nil }
            return (
                FieldMapping(field: field, column: column?.text ?? field.snakeCased, type: type),
                column?.position ?? entry.keyPosition
            )
        default:
            report("\(path) must be \(expected), not \(kindName(entry.value))", at: entry.valuePosition)
            return nil
        }
    }

    mutating func columnType(_ value: Value, field: String) -> ColumnType? {
        if let type = ColumnType(name: value.text) { return type }
        let names = ColumnType.allCases.map(\.rawValue) + ColumnType.aliases.keys.sorted()
        if let suggestion = suggestion(for: value.text.trimmingSpaces(), among: names) {
            report("unknown type '\(value.text)' for field \(field) (did you mean '\(suggestion)'?)", at: value.position)
        } else {
            let expected = ColumnType.allCases.map(\.rawValue).joined(separator: ", ")
            report("unknown type '\(value.text)' for field \(field) (expected one of \(expected))", at: value.position)
        }
        return nil
    }

    // MARK: Identifiers

    /// PostgreSQL truncates longer names silently (NAMEDATALEN is 64), and a NUL cannot cross
    /// libpq's C strings: both would make a table or column other than the one the file names.
    /// `kind` and `owner` make the sentence: "column" "of field title".
    mutating func checkIdentifier(
        _ name: String, kind: String, owner: String = "", at position: Position, maxBytes: Int = 63, why: String? = nil
    ) -> Bool {
        let owner = owner.isEmpty ? "" : " \(owner)"
        if name.isEmpty {
            report("\(kind) name\(owner) is empty", at: position)
            return false
        }
        if name.unicodeScalars.contains("\0") {
            report("\(kind) name\(owner) contains a NUL character", at: position)
            return false
        }
        let bytes = name.utf8.count
        if bytes > maxBytes {
            report(
                "\(kind) '\(name)'\(owner) is \(bytes) bytes long: \(why ?? "PostgreSQL names are at most \(maxBytes) bytes")",
                at: position
            )
            return false
        }
        return true
    }

    // MARK: Mappings

    /// The entries of a mapping in file order; `what` describes the mapping expected.
    mutating func entries(of node: Node, path: String, what: String) -> [Entry]? {
        guard case .mapping(let mapping) = node else {
            report("\(path.isEmpty ? "the pipeline file" : path) must be \(what), not \(kindName(node))", at: Position(node.mark))
            return nil
        }
        var result: [Entry] = []
        for (key, value) in mapping {
            guard case .scalar(let scalar) = key else {
                report("a key in \(path.isEmpty ? "the pipeline file" : path) is \(kindName(key)); keys must be plain names", at: Position(key.mark))
                continue
            }
            result.append(Entry(key: scalar.string, keyPosition: Position(scalar.mark), value: value))
        }
        return result
    }

    /// A mapping with a fixed set of keys; an unknown key is reported with the closest allowed one.
    /// A null value (`fake:` with nothing after it) reads as an empty mapping.
    mutating func section(_ node: Node, path: String, position: Position, allowed: [String]) -> Section? {
        var section = Section(path: path, position: position)
        if isNull(node) { return section }
        let expected = "a mapping with keys such as \(allowed.prefix(3).joined(separator: ", "))"
        guard let pairs = entries(of: node, path: path, what: expected) else { return nil }
        for entry in pairs {
            guard allowed.contains(entry.key) else {
                var message = "unknown key '\(entry.key)' \(section.whereabouts)"
                if let suggestion = suggestion(for: entry.key, among: allowed) {
                    message += " (did you mean '\(suggestion)'?)"
                } else {
                    message += " (expected \(alternatives(allowed, conjunction: "or")))"
                }
                report(message, at: entry.keyPosition)
                continue
            }
            section.entries[entry.key] = entry
        }
        return section
    }

    mutating func subsection(_ key: String, in parent: Section, allowed: [String], required: Bool) -> Section? {
        guard let entry = parent[key] else {
            if required { report("missing required key '\(key)' \(parent.whereabouts)", at: parent.position) }
            return nil
        }
        return section(entry.value, path: parent.path(of: key), position: entry.keyPosition, allowed: allowed)
    }

    // MARK: Scalars

    func isNull(_ node: Node) -> Bool {
        guard case .scalar(let scalar) = node, scalar.style == .plain || scalar.style == .any else { return false }
        return ["", "~", "null", "Null", "NULL"].contains(scalar.string)
    }

    func kindName(_ node: Node) -> String {
        switch node {
        case .scalar: return "a single value"
        case .mapping: return "a mapping"
        case .sequence: return "a list"
        case .alias: return "an alias"
        }
    }

    /// A scalar's value after `${VAR}` substitution; nil (reported) when it is not a scalar or a
    /// variable is missing.
    mutating func scalarValue(_ node: Node, path: String, expected: String) -> Value? {
        guard case .scalar(let scalar) = node else {
            report("\(path) must be \(expected), not \(kindName(node))", at: Position(node.mark))
            return nil
        }
        guard let text = substitute(scalar, path: path) else { return nil }
        return Value(text: text, position: Position(scalar.mark))
    }

    /// A scalar value by key. Absent or null: nil, and "missing" when required.
    mutating func text(_ key: String, in section: Section, expected: String, required: Bool = false) -> Value? {
        guard let entry = section[key] else {
            if required { report("missing required key '\(key)' \(section.whereabouts)", at: section.position) }
            return nil
        }
        if isNull(entry.value) {
            if required { report("\(section.path(of: key)) has no value: it must be \(expected)", at: entry.keyPosition) }
            return nil
        }
        return scalarValue(entry.value, path: section.path(of: key), expected: expected)
    }

    /// Like `text`, but no sentence ever quotes the value.
    mutating func secret(_ key: String, in section: Section, emptyMeansAbsent: Bool, required: Bool = false) -> Secret? {
        guard let value = text(key, in: section, expected: "a string", required: required) else { return nil }
        if value.text.isEmpty {
            if emptyMeansAbsent { return nil }
            report("\(section.path(of: key)) is empty", at: value.position)
            return nil
        }
        return Secret(value.text)
    }

    /// A string that, when given, may not be empty.
    mutating func nonEmptyText(_ key: String, in section: Section, expected: String) -> String? {
        guard let value = text(key, in: section, expected: expected) else { return nil }
        guard !value.text.isEmpty else {
            report("\(section.path(of: key)) is empty: it must be \(expected)", at: value.position)
            return nil
        }
        return value.text
    }

    mutating func integer(_ key: String, in section: Section, range: ClosedRange<Int>) -> Int? {
        let expected: String
        if range.upperBound == Int.max {
            expected = range.lowerBound == 0 ? "a whole number of 0 or more" : "a whole number of at least \(range.lowerBound)"
        } else {
            expected = "a whole number from \(range.lowerBound) to \(range.upperBound)"
        }
        guard let value = text(key, in: section, expected: expected) else { return nil }
        guard let n = parseInteger(value.text), range.contains(n) else {
            report("\(section.path(of: key)) must be \(expected), not '\(value.text)'", at: value.position)
            return nil
        }
        return n
    }

    /// YAML 1.2's core booleans only: `yes` and `on` are strings there, and a typo must not
    /// silently mean false.
    mutating func boolean(_ key: String, in section: Section) -> Bool? {
        guard let value = text(key, in: section, expected: "true or false") else { return nil }
        switch value.text {
        case "true", "True", "TRUE": return true
        case "false", "False", "FALSE": return false
        default:
            report("\(section.path(of: key)) must be true or false, not '\(value.text)'", at: value.position)
            return nil
        }
    }

    mutating func number(_ key: String, in section: Section, minimum: Double, inclusive: Bool) -> Double? {
        let bound = minimum == minimum.rounded() ? String(Int(minimum)) : String(minimum)
        let expected = inclusive ? "a number of \(bound) or more" : "a number greater than \(bound)"
        guard let value = text(key, in: section, expected: expected) else { return nil }
        guard let n = Double(value.text.replacingOccurrences(of: "_", with: "")), n.isFinite,
            inclusive ? n >= minimum : n > minimum
        else {
            report("\(section.path(of: key)) must be \(expected), not '\(value.text)'", at: value.position)
            return nil
        }
        return n
    }

    /// One of an enum's raw values; `explanations` replaces the generic sentence for values
    /// that deserve a reason of their own.
    mutating func choice<E: CaseIterable & RawRepresentable>(
        _ type: E.Type, _ key: String, in section: Section, explanations: [String: String] = [:]
    ) -> E? where E.RawValue == String {
        let names = E.allCases.map(\.rawValue)
        let expected = alternatives(names, conjunction: "or")
        guard let value = text(key, in: section, expected: expected) else { return nil }
        if let choice = E(rawValue: value.text) { return choice }
        if let explanation = explanations[value.text] {
            report(explanation, at: value.position)
            return nil
        }
        var message = "unknown value '\(value.text)' for \(key) (expected \(expected)"
        if let suggestion = suggestion(for: value.text, among: names) { message += "; did you mean '\(suggestion)'?" }
        report(message + ")", at: value.position)
        return nil
    }

    /// A list of strings; nil (reported) when it is something else.
    mutating func stringList(_ key: String, in section: Section, expected: String) -> [String]? {
        guard let entry = section[key], !isNull(entry.value) else { return nil }
        let path = section.path(of: key)
        guard case .sequence(let sequence) = entry.value else {
            report("\(path) must be \(expected), not \(kindName(entry.value))", at: entry.valuePosition)
            return nil
        }
        var strings: [String] = []
        var failed = false
        for item in sequence {
            if let value = scalarValue(item, path: path, expected: "a list of names, each a single value") {
                strings.append(value.text)
            } else {
                failed = true
            }
        }
        return failed ? nil : strings
    }

    // MARK: ${VAR} substitution

    /// Replaces `${VAR}` and `${VAR:-default}` from the environment, and `$$` by `$`. A `$`
    /// followed by anything else stays as it is, so passwords with a `$` in them need no escaping.
    mutating func substitute(_ scalar: Node.Scalar, path: String) -> String? {
        let chars = Array(scalar.string.unicodeScalars)
        var out = String.UnicodeScalarView()
        var failed = false
        var i = 0
        while i < chars.count {
            guard chars[i] == "$", i + 1 < chars.count, chars[i + 1] == "$" || chars[i + 1] == "{" else {
                out.append(chars[i])
                i += 1
                continue
            }
            if chars[i + 1] == "$" {
                out.append("$")
                i += 2
                continue
            }
            guard let close = chars[(i + 2)...].firstIndex(of: "}") else {
                report(
                    "unterminated '${' in \(path): close it with '}', or write '$$' for a literal '$'",
                    at: position(ofOffset: i, in: scalar)
                )
                return nil
            }
            let inner = String(String.UnicodeScalarView(chars[(i + 2)..<close]))
            let name: String
            let fallback: String?
            if let separator = inner.range(of: ":-") {
                name = String(inner[..<separator.lowerBound])
                fallback = String(inner[separator.upperBound...])
            } else {
                name = inner
                fallback = nil
            }
            if !isVariableName(name) {
                report(
                    "'${\(name)}' in \(path) is not a variable reference: names are letters, digits and '_' (write '$$' for a literal '$')",
                    at: position(ofOffset: i, in: scalar)
                )
                failed = true
            } else if let value = environment[name], !(fallback != nil && value.isEmpty) {
                out.append(contentsOf: value.unicodeScalars)
            } else if let fallback {
                out.append(contentsOf: fallback.unicodeScalars)
            } else {
                report("environment variable \(name) is not set (needed by \(path))", at: position(ofOffset: i, in: scalar))
                failed = true
            }
            i = close + 1
        }
        return failed ? nil : String(out)
    }

    func isVariableName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, !("0"..."9").contains(first) else { return false }
        return name.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "_"
        }
    }

    /// The position of the `offset`th Unicode scalar of a scalar's value, when the value is
    /// written on one line as it reads (plain, or quoted without escapes); else the scalar's own.
    func position(ofOffset offset: Int, in scalar: Node.Scalar) -> Position {
        let start = Position(scalar.mark)
        let prefix: Int
        switch scalar.style {
        case .plain, .any: prefix = 0
        case .singleQuoted, .doubleQuoted: prefix = 1
        default: return start
        }
        guard start.line >= 1, start.line <= lines.count, start.column >= 1 else { return start }
        let line = lines[start.line - 1]
        let value = Array(scalar.string.unicodeScalars)
        let from = start.column - 1 + prefix
        guard from + value.count <= line.count, Array(line[from..<(from + value.count)]) == value else { return start }
        return Position(line: start.line, column: start.column + prefix + offset)
    }
}

// MARK: - Small helpers

/// `5000`, `5_000` and `+5000`.
private func parseInteger(_ text: String) -> Int? {
    let digits = text.trimmingSpaces()
    guard !digits.hasPrefix("_"), !digits.hasSuffix("_"), !digits.contains("__") else { return nil }
    return Int(digits.replacingOccurrences(of: "_", with: ""))
}

private func parseUInt64(_ text: String) -> UInt64? {
    let digits = text.trimmingSpaces()
    guard !digits.hasPrefix("_"), !digits.hasSuffix("_"), !digits.contains("__") else { return nil }
    return UInt64(digits.replacingOccurrences(of: "_", with: ""))
}

/// "a, b or c".
private func alternatives(_ names: [String], conjunction: String) -> String {
    guard names.count > 1 else { return names.first ?? "" }
    return names.dropLast().joined(separator: ", ") + " \(conjunction) " + names.last!
}

/// The allowed name closest to a misspelled one: at most two edits away, or the same but for
/// case. Nil when nothing is that close, so that a wild guess is not offered.
private func suggestion(for name: String, among candidates: [String]) -> String? {
    var best: (candidate: String, distance: Int)?
    for candidate in candidates where candidate != name {
        let distance = editDistance(name.lowercased(), candidate.lowercased())
        guard distance <= 2, distance < candidate.count else { continue }
        if best == nil || distance < best!.distance { best = (candidate, distance) }
    }
    return best?.candidate
}

/// Levenshtein distance, by Characters.
private func editDistance(_ a: String, _ b: String) -> Int {
    let a = Array(a)
    let b = Array(b)
    if a.isEmpty { return b.count }
    if b.isEmpty { return a.count }
    var previous = Array(0...b.count)
    var current = [Int](repeating: 0, count: b.count + 1)
    for i in 1...a.count {
        current[0] = i
        for j in 1...b.count {
            let substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)
            current[j] = min(previous[j] + 1, current[j - 1] + 1, substitution)
        }
        swap(&previous, &current)
    }
    return previous[b.count]
}
