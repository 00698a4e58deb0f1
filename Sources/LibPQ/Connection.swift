import CLibPQ

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// One libpq connection. Calls block the calling thread, so callers keep them off Swift's
/// cooperative pool. A connection is used by one thread at a time.
// @unchecked: libpq's handle is not thread-safe; what guards it is its owner's (a session's
// serial queue, the token table's lock, or a single task).
public final class Connection: @unchecked Sendable {
    private var handle: OpaquePointer?

    /// Connects with anything libpq accepts: a `postgresql://` URI or a `key=value` string, with
    /// `PG*` environment variables, `PGPASSFILE` and `PGSERVICE` applying as usual. Its waits are
    /// bounded (`waitBounds`) where none of those bounds them.
    public init(_ conninfo: String) throws {
        var environment: [String: String] = [:]
        for name in ["PGSERVICE", "PGCONNECT_TIMEOUT"] { environment[name] = getenv(name).map { String(cString: $0) } }
        let conn = Self.connect(conninfo, adding: Self.waitBounds(for: conninfo, environment: environment))
        guard let conn, PQstatus(conn) == CONNECTION_OK else {
            let message = conn.flatMap { PQerrorMessage($0) }.map { String(cString: $0) } ?? "out of memory"
            PQfinish(conn)
            throw PostgresError(kind: .connection, message: Connection.withoutPassword(message.trimmingTrailingNewlines(), conninfo: conninfo))
        }
        // > "The default notice processor … prints the message on stderr." Notices such as
        // > "relation already exists, skipping" are not for the user's terminal.
        PQsetNoticeProcessor(conn, { _, _ in }, nil)
        handle = conn
        widenSendBuffer()
    }

    /// libpq waits for ever by default: for a server that accepts the connection and never
    /// answers (a proxy or a load balancer before a server that is gone, a host that hung), and
    /// for one that went away without a word while a query waited (until the kernel gives up on
    /// an idle connection: two hours). A run held there forever, and a scheduled job's next run
    /// found it still holding its zones. These bound both: a connection is given up after 30 s,
    /// and a server that stops answering while a query waits, after about two minutes
    /// (keepalive probes from 60 s of silence, 10 s apart, 6 of them). A server that is there
    /// but slow (a lock waited on, a long statement) answers the probes and is waited for. Not
    /// `tcp_user_timeout`: a COPY that waits on another transaction's rows stops the server
    /// reading, and since Linux 5.11 that timeout closes a connection whose data waits behind
    /// a closed window however well its peer answers; a server gone in the middle of a COPY is
    /// given up by the kernel's retransmissions (about 15 minutes). Each applies only over TCP,
    /// but `connect_timeout`, and only where the connection string, `PGCONNECT_TIMEOUT` or a
    /// service file does not set it.
    public static let defaultWaitBounds: [(keyword: String, value: String)] = [
        ("connect_timeout", "30"), ("keepalives_idle", "60"), ("keepalives_interval", "10"), ("keepalives_count", "6"),
    ]

    /// The bounds of `defaultWaitBounds` that `conninfo` and `environment` leave unset. None with
    /// a service (`service`, `PGSERVICE`): a service file's settings apply only where nothing
    /// else set them, and these would hide its own.
    public static func waitBounds(for conninfo: String, environment: [String: String]) -> [(keyword: String, value: String)] {
        let given = Set((parameters(of: conninfo) ?? []).map(\.keyword))
        guard !given.contains("service"), environment["PGSERVICE"].map(\.isEmpty) ?? true else { return [] }
        return defaultWaitBounds.filter { bound in
            !given.contains(bound.keyword) && parameterNames.contains(bound.keyword)
                && !(bound.keyword == "connect_timeout" && !(environment["PGCONNECT_TIMEOUT"] ?? "").isEmpty)
        }
    }

    /// `PQconnectdbParams` with `settings` first and `conninfo` last, as its `dbname` expanded:
    /// what the string sets wins.
    private static func connect(_ conninfo: String, adding settings: [(keyword: String, value: String)]) -> OpaquePointer? {
        // > PQconnectdbParams: "If expand_dbname is non-zero, the value for the first dbname key
        // > word is checked to see if it is a connection string. If so, it is "expanded" into the
        // > individual connection parameters extracted from the string." … "when key words are
        // > repeated, the last processed value is retained."
        let pairs = settings + [("dbname", conninfo)]
        let keywords = pairs.map { strdup($0.keyword) } + [nil]
        let values = pairs.map { strdup($0.value) } + [nil]
        defer { for pointer in keywords + values { free(pointer) } }
        let constantKeywords = keywords.map { UnsafePointer($0) }
        let constantValues = values.map { UnsafePointer($0) }
        return constantKeywords.withUnsafeBufferPointer { k in
            constantValues.withUnsafeBufferPointer { v in PQconnectdbParams(k.baseAddress, v.baseAddress, 1) }
        }
    }

    /// What a connection over a Unix-domain socket asks the kernel for as its send buffer. A
    /// socket's default (net.core.wmem_default, 208 KiB on Linux) holds about 4 ms of a COPY's
    /// rows for the server: when the client was not scheduled within that, the server waited
    /// for rows. A backfill of one zone (400,000 records in process), where no other zone's
    /// session fills such gaps, took 8.1 s instead of 9.4, and in a second set 8.3 s instead of
    /// 8.6, with 8-15% less CPU in four runs of five (medians of five runs each, in turns); with
    /// four zones, two at a time, nothing changed that the runs could tell. A TCP socket's
    /// buffer grows by itself to net.ipv4.tcp_wmem's largest (4 MiB by default), which this
    /// matches; the kernel grants at most net.core.wmem_max.
    public static let unixSocketSendBufferBytes: Int32 = 4 << 20

    private func widenSendBuffer() {
        guard let handle else { return }
        let fd = PQsocket(handle)
        guard fd >= 0 else { return }
        var address = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0, Int32(address.ss_family) == AF_UNIX else { return }
        var size = Self.unixSocketSendBufferBytes
        // > socket(7), SO_SNDBUF: "The kernel doubles this value (to allow space for bookkeeping
        // > overhead) when it is set using setsockopt(2), and this doubled value is returned by
        // > getsockopt(2)." A refusal leaves the default, which works, only slower.
        _ = setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
    }

    /// The value of each parameter the open connection was made with (`connect_timeout`,
    /// `keepalives_idle`, …), defaults included; empty when closed. Never the password.
    public var settings: [String: String] {
        // > PQconninfo: "Returns the connection options used by a live connection."
        guard let handle, let options = PQconninfo(handle) else { return [:] }
        defer { PQconninfoFree(options) }
        var settings: [String: String] = [:]
        var option = options
        while let keyword = option.pointee.keyword {
            let name = String(cString: keyword)
            if name != "password", let value = option.pointee.val { settings[name] = String(cString: value) }
            option += 1
        }
        return settings
    }

    /// The send buffer the kernel gave the connection's socket, in bytes (Linux reports twice
    /// what was granted, the rest being its own bookkeeping); nil when closed.
    public var sendBufferBytes: Int? {
        guard let handle else { return nil }
        var size: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(PQsocket(handle), SOL_SOCKET, SO_SNDBUF, &size, &length) == 0 else { return nil }
        return Int(size)
    }

    /// The process that listens on the other end of a Unix socket, as this machine's kernel
    /// knows it: PostgreSQL's postmaster, whose children the sessions are.
    /// > unix(7), SO_PEERCRED: "The returned credentials are those that were in effect at the
    /// > time of the call to connect(2), listen(2), or socketpair(2)."
    /// nil over TCP, where nothing proves which process answers, when closed, or when that
    /// process is outside this one's PID namespace (the kernel then reports 0).
    public var peerProcessID: Int32? {
        #if os(Linux)
            guard let handle else { return nil }
            let fd = PQsocket(handle)
            guard fd >= 0 else { return nil }
            // `struct ucred { pid_t pid; uid_t uid; gid_t gid; }`, which Glibc's module leaves
            // out (it needs _GNU_SOURCE): three 32-bit words, the pid first.
            var credentials: [Int32] = [0, 0, 0]
            var length = socklen_t(MemoryLayout<Int32>.size * credentials.count)
            let asked = credentials.withUnsafeMutableBytes { getsockopt(fd, SOL_SOCKET, SO_PEERCRED, $0.baseAddress, &length) }
            guard asked == 0, length == socklen_t(MemoryLayout<Int32>.size * 3), credentials[0] > 0 else { return nil }
            return credentials[0]
        #else
            return nil
        #endif
    }

    deinit { close() }

    /// Whether libpq can parse a connection string or URI, without connecting. Its sentence
    /// for one it cannot is not returned: it may quote the password.
    public static func canParse(_ conninfo: String) -> Bool {
        var error: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(conninfo, &error) else {
            if let error { PQfreemem(error) }
            return false
        }
        PQconninfoFree(options)
        return true
    }

    /// The parameters a connection string or URI sets, in libpq's order, with the values as libpq
    /// reads them (quotes, backslash escapes and percent-encoding undone); nil when libpq cannot
    /// parse it. Its sentence for one it cannot is not returned: it may quote the password.
    public static func parameters(of conninfo: String) -> [(keyword: String, value: String)]? {
        // > PQconninfoParse: "All legal options will be present in the result array, but the
        // > PQconninfoOption for any option not present in the connection string will have val
        // > set to NULL." … "Note that only options explicitly specified in the string will have
        // > values set in the result array; no defaults are inserted."
        var error: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(conninfo, &error) else {
            if let error { PQfreemem(error) }
            return nil
        }
        defer { PQconninfoFree(options) }
        var parameters: [(keyword: String, value: String)] = []
        var option = options
        while let keyword = option.pointee.keyword {
            if let value = option.pointee.val { parameters.append((String(cString: keyword), String(cString: value))) }
            option += 1
        }
        return parameters
    }

    /// The version of the libpq this process runs with, such as `15.18`.
    public static var libraryVersion: String {
        // > PQlibVersion: "The result is formed by multiplying the library's major version number
        // > by 10000 and adding the minor version number." (libpq 10 and later)
        let number = Int(PQlibVersion())
        return number >= 100_000 ? "\(number / 10_000).\(number % 10_000)" : "\(number / 10_000).\(number / 100 % 100).\(number % 100)"
    }

    /// The connection parameters this libpq knows (`host`, `dbname`, `sslmode`, …).
    public static let parameterNames: [String] = {
        // > PQconndefaults: "Returns the default connection options. … The return value points
        // > to an array of PQconninfoOption structures, which ends with an entry having a null
        // > keyword pointer."
        guard let options = PQconndefaults() else { return [] }
        defer { PQconninfoFree(options) }
        var names: [String] = []
        var option = options
        while let keyword = option.pointee.keyword {
            names.append(String(cString: keyword))
            option += 1
        }
        return names
    }()

    /// libpq quotes the piece of a connection string it could not parse, which may be the
    /// password; such a message is replaced, and a password libpq parsed is cut out.
    static func withoutPassword(_ message: String, conninfo: String) -> String {
        // > PQconninfoParse: "Returns parsed connection options from the provided connection
        // > string. … If errmsg is not NULL, then *errmsg is set to NULL on success, else to a
        // > malloc'd error string explaining the problem."
        var error: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(conninfo, &error) else {
            if let error { PQfreemem(error) }
            return "the connection string could not be parsed; check its syntax (it is not shown, as it may hold a password)"
        }
        defer { PQconninfoFree(options) }
        var cleaned = message
        var option = options
        while let keyword = option.pointee.keyword {
            let name = String(cString: keyword)
            if name.hasSuffix("password"), let value = option.pointee.val {
                let secret = String(cString: value)
                if !secret.isEmpty { cleaned = cleaned.replacingAll(secret, with: "<redacted>") }
            } else if name == "host" || name == "hostaddr", let value = option.pointee.val, String(cString: value).utf8.contains(UInt8(ascii: "@")) {
                // A URI whose password holds an unencoded '@': libpq ends the password at the
                // first, and takes the rest of it for the host, which its errors print.
                let host = String(cString: value)
                cleaned = cleaned.replacingAll(host, with: "<redacted>")
                // The password's piece alone too (by scalars: a prepended mark before the '@'
                // is one Character with it), wherever the message quotes it apart from the host.
                if let last = host.unicodeScalars.lastIndex(of: "@"), last > host.startIndex {
                    cleaned = cleaned.replacingAll(String(host.unicodeScalars[..<last]), with: "<redacted>")
                }
            } else if name == "dbname", let value = option.pointee.val {
                // A connection string pasted as the database name, password and all: a server
                // that has no such database quotes the name whole in its FATAL message.
                let dbname = String(cString: value)
                if dbname.lowercased().contains("password") { cleaned = cleaned.replacingAll(dbname, with: "<redacted>") }
            }
            option += 1
        }
        return cleaned
    }

    public func close() {
        if let handle { PQfinish(handle) }
        handle = nil
    }

    /// Opens a connection for the duration of `body` and closes it on every path.
    public static func withConnection<T>(_ conninfo: String, _ body: (Connection) throws -> T) throws -> T {
        let connection = try Connection(conninfo)
        defer { connection.close() }
        return try body(connection)
    }

    private var conn: OpaquePointer {
        get throws {
            guard let handle else { throw PostgresError(kind: .query, message: "the connection is closed") }
            return handle
        }
    }

    /// Runs one or more statements without parameters (DDL, `BEGIN`, `COMMIT`).
    @discardableResult
    public func execute(_ sql: String) throws -> QueryResult {
        let conn = try self.conn
        let result = PQexec(conn, sql)
        defer { PQclear(result) }
        return try check(result, conn)
    }

    /// Runs one statement with `$1…$n` parameters, each sent as text (nil is SQL NULL). Values
    /// never become part of the SQL text.
    @discardableResult
    ///
    /// A parameter holding a NUL character is refused: libpq reads a parameter as a C string, so
    /// it would silently end at the NUL, and two values alike up to it would be stored as one.
    public func query(_ sql: String, _ parameters: [String?] = []) throws -> QueryResult {
        let conn = try self.conn
        if let index = parameters.firstIndex(where: { $0?.utf8.contains(0) == true }) {
            throw PostgresError(
                kind: .query,
                message: "parameter $\(index + 1) holds a NUL character, which PostgreSQL text cannot hold; nothing was sent")
        }
        let cStrings: [UnsafeMutablePointer<CChar>?] = parameters.map { $0.map { strdup($0) } ?? nil }
        defer { for pointer in cStrings { free(pointer) } }
        let result = cStrings.withUnsafeBufferPointer { buffer in
            buffer.baseAddress!.withMemoryRebound(to: UnsafePointer<CChar>?.self, capacity: max(buffer.count, 1)) { values in
                PQexecParams(conn, sql, Int32(parameters.count), nil, parameters.isEmpty ? nil : values, nil, nil, 0)
            }
        }
        defer { PQclear(result) }
        return try check(result, conn)
    }

    /// Runs `body` in a transaction: committed when it returns, rolled back when it throws.
    public func transaction<T>(_ body: () throws -> T) throws -> T {
        try execute("BEGIN")
        do {
            let value = try body()
            try execute("COMMIT")
            return value
        } catch {
            _ = try? execute("ROLLBACK")
            throw error
        }
    }

    /// `COPY … FROM STDIN`: `body` hands chunks of data to the writer; returns the rows copied.
    @discardableResult
    public func copyIn(_ sql: String, _ body: (CopyInWriter) throws -> Void) throws -> Int {
        let conn = try self.conn
        let start = PQexec(conn, sql)
        let status = PQresultStatus(start)
        if status != PGRES_COPY_IN {
            defer { PQclear(start) }
            _ = try check(start, conn)
            throw PostgresError(kind: .copy, message: "the server did not enter COPY IN mode")
        }
        PQclear(start)
        let writer = CopyInWriter(conn: conn)
        var failure: (any Error)?
        do {
            try body(writer)
        } catch {
            failure = error
        }
        // > PQputCopyEnd: "If errormsg is not NULL, the copy is forced to fail, with the string
        // > pointed to by errormsg used as the error message."
        if PQputCopyEnd(conn, failure == nil ? nil : "aborted by zonefeed") != 1 {
            failure = failure ?? PostgresError(kind: .copy, message: String(cString: PQerrorMessage(conn)).trimmingTrailingNewlines())
        }
        var rows = 0
        var serverError: PostgresError?
        while let result = PQgetResult(conn) {
            if PQresultStatus(result) == PGRES_COMMAND_OK {
                rows = Int(String(cString: PQcmdTuples(result))) ?? 0
            } else if serverError == nil {
                serverError = PostgresError(result: result, connection: conn, kind: .copy)
            }
            PQclear(result)
        }
        if let failure { throw failure }
        if let serverError { throw serverError }
        return rows
    }

    private func check(_ result: OpaquePointer?, _ conn: OpaquePointer) throws -> QueryResult {
        guard let result else {
            throw PostgresError(kind: .query, message: String(cString: PQerrorMessage(conn)).trimmingTrailingNewlines())
        }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_EMPTY_QUERY:
            return QueryResult(columns: [], rows: [], affectedRows: Int(String(cString: PQcmdTuples(result))) ?? 0)
        case PGRES_TUPLES_OK:
            let rowCount = PQntuples(result)
            let columnCount = PQnfields(result)
            var columns: [String] = []
            for c in 0..<columnCount { columns.append(String(cString: PQfname(result, c))) }
            var rows: [[String?]] = []
            rows.reserveCapacity(Int(rowCount))
            for r in 0..<rowCount {
                var row: [String?] = []
                row.reserveCapacity(Int(columnCount))
                for c in 0..<columnCount {
                    row.append(PQgetisnull(result, r, c) == 1 ? nil : String(cString: PQgetvalue(result, r, c)))
                }
                rows.append(row)
            }
            return QueryResult(columns: columns, rows: rows, affectedRows: Int(rowCount))
        default:
            throw PostgresError(result: result, connection: conn, kind: .query)
        }
    }
}

/// Hands data to a running `COPY … FROM STDIN`.
public struct CopyInWriter {
    let conn: OpaquePointer

    public func write(_ bytes: [UInt8]) throws {
        try bytes.withUnsafeBufferPointer { try write($0) }
    }

    /// Sends the bytes in chunks of at most 1 MiB (PQputCopyData takes an int length).
    public func write(_ bytes: UnsafeBufferPointer<UInt8>) throws {
        var start = 0
        while start < bytes.count {
            let end = min(bytes.count, start + (1 << 20))
            try writeChunk(UnsafeBufferPointer(rebasing: bytes[start..<end]))
            start = end
        }
    }

    private func writeChunk(_ bytes: UnsafeBufferPointer<UInt8>) throws {
        guard !bytes.isEmpty else { return }
        // > PQputCopyData: "The result is 1 if the data was queued, zero if it was not queued
        // > because of full buffers (this will only happen in nonblocking mode), or -1 if an
        // > error occurred."
        let ok = bytes.withMemoryRebound(to: CChar.self) { PQputCopyData(conn, $0.baseAddress, Int32($0.count)) }
        if ok != 1 {
            throw PostgresError(kind: .copy, message: String(cString: PQerrorMessage(conn)).trimmingTrailingNewlines())
        }
    }
}
