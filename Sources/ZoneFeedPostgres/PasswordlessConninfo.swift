import Foundation
import LibPQ

/// A connection string with its password taken out, for a program whose command line others can
/// read (`ps` shows every process's arguments to every local user): the string to pass, and the
/// password to hand over another way, through a password file (`passwordFileLine`).
///
///     postgresql://app:s3cret@db/app?sslmode=require  →  host='db' user='app' dbname='app' sslmode='require' + s3cret
///     host=db password='se cret' dbname=app           →  host='db' dbname='app' + se cret
///
/// libpq itself splits the string (`Connection.parameters(of:)`), so a URI's percent-encoding,
/// quotes and backslash escapes mean what they mean to libpq; what is left is written back in the
/// `key='value'` form, which says the same to libpq. A string without a password comes back as
/// given. `sslpassword` (the client key's passphrase), which no environment variable carries,
/// goes into a connection service file (`serviceFile`, named by `service=`), unless the string
/// or the environment names a service of its own, or the value cannot be a line of one.
public struct PasswordlessConninfo: Sendable, Equatable {
    /// The connection string without `password` (nor `sslpassword` when `serviceFile` has it).
    public var conninfo: String
    /// The password it held; nil when none, or an empty one (which libpq takes as none).
    public var password: String?
    /// The text of a connection service file holding the `sslpassword` taken out, for
    /// `PGSERVICEFILE`; nil when there was none to take out.
    public var serviceFile: String?

    /// The service `serviceFile` defines.
    static let service = "zonefeed"

    /// Nil when libpq cannot parse `conninfo`. `environment`: whether PGSERVICE names a service.
    public init?(_ conninfo: String, environmentNamesAService: Bool = ProcessInfo.processInfo.environment["PGSERVICE"].map { !$0.isEmpty } ?? false) {
        guard var parameters = Connection.parameters(of: conninfo) else { return nil }
        let password = parameters.first(where: { $0.keyword == "password" })?.value
        // > "Leading and trailing whitespace is ignored" in a service file's lines, and a line
        // > holds one parameter: such a passphrase stays where it was.
        let namesAService = environmentNamesAService || parameters.contains { $0.keyword == "service" }
        var sslPassword = parameters.first(where: { $0.keyword == "sslpassword" }).map(\.value)
        if let value = sslPassword,
            value.isEmpty || namesAService || value.unicodeScalars.contains(where: { $0 == "\n" || $0 == "\r" })
                || [value.unicodeScalars.first, value.unicodeScalars.last].contains(where: { $0.map(Self.isCSpace) ?? false })
        {
            sslPassword = nil
        }
        guard (password.map { !$0.isEmpty } ?? false) || sslPassword != nil else {
            self.conninfo = conninfo
            self.password = nil
            return
        }
        self.password = password.flatMap { $0.isEmpty ? nil : $0 }
        parameters.removeAll { $0.keyword == "password" || (sslPassword != nil && $0.keyword == "sslpassword") }
        var pairs = parameters.map { "\($0.keyword)='\(Self.quoted($0.value))'" }
        if let sslPassword {
            serviceFile = "[\(Self.service)]\nsslpassword=\(sslPassword)\n"
            pairs.append("service='\(Self.service)'")
        }
        self.conninfo = pairs.joined(separator: " ")
    }

    /// What C's `isspace` takes for space, which libpq trims a service file's values of.
    static func isCSpace(_ scalar: Unicode.Scalar) -> Bool { [" ", "\t", "\n", "\u{0B}", "\u{0C}", "\r"].contains(scalar) }

    /// A value inside single quotes in a `key='value'` string.
    static func quoted(_ value: String) -> String {
        // > "To write an empty value, or a value containing spaces, surround it with single quotes,
        // > for example keyword = 'a value'. Single quotes and backslashes within the value must be
        // > escaped with a backslash, i.e., \' and \\." (libpq, 34.1.1.1)
        value.replacingOccurrences(of: "\\", with: "\\\\", options: .literal).replacingOccurrences(of: "'", with: "\\'", options: .literal)
    }

    /// The one line of a libpq password file (`PGPASSFILE`) that gives the password to whatever
    /// host, port, database and user the connection string leads to: a file written for one
    /// program and one connection string, which may name several hosts, a socket folder or none.
    /// Nil when there is no password, or it holds a line break, which a line cannot hold.
    public var passwordFileLine: String? {
        guard let password, !password.unicodeScalars.contains(where: { $0 == "\n" || $0 == "\r" }) else { return nil }
        // > "Each of the first four fields can be a literal value, or *, which matches anything.
        // > … If an entry needs to contain : or \, escape this character with \." (libpq, 34.16)
        let escaped = password.replacingOccurrences(of: "\\", with: "\\\\", options: .literal).replacingOccurrences(of: ":", with: "\\:", options: .literal)
        return "*:*:*:*:\(escaped)\n"
    }
}
