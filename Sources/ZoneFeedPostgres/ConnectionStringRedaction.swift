import Foundation

/// A libpq connection string that can be printed: the password (and the client key's
/// `sslpassword`) replaced by `<redacted>`, everything else kept so that a person can still see
/// which server and database are meant.
///
///     postgresql://app:s3cret@db/app?sslmode=require  →  postgresql://app:<redacted>@db/app?sslmode=require
///     host=db password='se cret' dbname=app           →  host=db password=<redacted> dbname=app
///
/// `embedded` and strings without a password come back unchanged. When in doubt (a string libpq
/// would not parse either) this hides more rather than less.
public func redactConnectionString(_ s: String) -> String {
    let lowered = s.lowercased()
    if lowered.hasPrefix("postgresql://") || lowered.hasPrefix("postgres://") {
        return redactConnectionURI(s)
    }
    return redactConninfo(s)
}

/// The connection parameters whose values are secrets.
private func isSecretParameter(_ key: some StringProtocol) -> Bool {
    let name = (String(key).removingPercentEncoding ?? String(key)).lowercased()
    return name == "password" || name == "sslpassword"
}

/// `postgresql://[userinfo@][hosts][/dbname][?key=value&...]`.
private func redactConnectionURI(_ s: String) -> String {
    guard let schemeEnd = s.range(of: "://")?.upperBound else { return s }
    let rest = s[schemeEnd...]

    // The userinfo ends at the last '@' before the query. A password holding an unencoded '?'
    // would hide its '@' behind the query's start; libpq would reject such a URI, but it must not
    // be printed either, so an '@' right after the '?' that is not inside a key=value still counts.
    let queryStart = rest.firstIndex(of: "?") ?? rest.endIndex
    var at = rest[..<queryStart].lastIndex(of: "@")
    if at == nil, queryStart < rest.endIndex, let laterAt = rest[queryStart...].firstIndex(of: "@"),
        !rest[queryStart..<laterAt].contains(where: { $0 == "=" || $0 == "&" })
    {
        at = laterAt
    }

    var out = String(s[..<schemeEnd])
    var hostStart = rest.startIndex
    if let at {
        let userinfo = rest[..<at]
        if let colon = userinfo.firstIndex(of: ":") {
            out += userinfo[...colon] + "<redacted>"
        } else {
            out += userinfo
        }
        out += "@"
        hostStart = rest.index(after: at)
    }

    let tail = rest[hostStart...]
    guard let q = tail.firstIndex(of: "?") else { return out + tail }
    out += tail[...q]
    let parameters = tail[tail.index(after: q)...]
        .split(separator: "&", omittingEmptySubsequences: false)
        .map { parameter -> String in
            guard let eq = parameter.firstIndex(of: "=") else { return String(parameter) }
            let key = parameter[..<eq]
            if isSecretParameter(key) { return String(key) + "=<redacted>" }
            return String(parameter)
        }
    return out + parameters.joined(separator: "&")
}

/// `key=value key='quoted value'`, redacted value by value; a `dbname` may itself hold a whole
/// connection string, which libpq expands, so it is redacted in turn.
private func redactConninfo(_ s: String) -> String {
    let parsed = ConninfoParser.parse(s)
    var out = ""
    var copied = s.startIndex
    for pair in parsed.pairs {
        if isSecretParameter(pair.key) {
            out += s[copied..<pair.value.lowerBound] + "<redacted>"
            copied = pair.value.upperBound
        } else if pair.key == "dbname" {
            let value = s[pair.value]
            let quoted = value.hasPrefix("'")
            let inner = quoted ? value.dropFirst().dropLast() : value
            let redacted = redactConnectionString(String(inner))
            if redacted != inner {
                out += s[copied..<pair.value.lowerBound] + (quoted ? "'\(redacted)'" : redacted)
                copied = pair.value.upperBound
            }
        }
    }
    guard let failure = parsed.failure else { return out + s[copied...] }
    // libpq would refuse the rest too; print it only if it cannot hold a password.
    out += s[copied..<failure.index]
    let remainder = s[failure.index...]
    return out + (remainder.lowercased().contains("password") ? "<redacted>" : String(remainder))
}

/// A scanner for libpq's `key = value` connection strings, following `conninfo_parse` in libpq's
/// fe-connect.c: spaces around `=` are allowed, a value is either a run of non-space characters
/// or single-quoted, and a backslash escapes the next character in both.
///
/// Kept beside libpq's own parser, which decides whether a string is valid
/// (`Connection.canParse`), because libpq gives values but not where they were written: hiding
/// a password in place, the rest of the string kept as the user wrote it, needs the positions.
/// It also says which pair is wrong without quoting it, where libpq's message may quote a password.
struct ConninfoParser {
    struct Pair {
        var key: Substring
        /// The value as written, quotes included.
        var value: Range<String.Index>
    }

    struct Failure {
        /// Where the pair that could not be parsed starts.
        var index: String.Index
        var problem: String
    }

    var pairs: [Pair] = []
    var failure: Failure?

    static func parse(_ s: String) -> ConninfoParser {
        var result = ConninfoParser()
        var i = s.startIndex
        func skipSpaces() {
            while i < s.endIndex, s[i].isWhitespace { i = s.index(after: i) }
        }
        while true {
            skipSpaces()
            guard i < s.endIndex else { break }
            let pairStart = i
            while i < s.endIndex, !s[i].isWhitespace, s[i] != "=" { i = s.index(after: i) }
            let key = s[pairStart..<i]
            skipSpaces()
            guard i < s.endIndex, s[i] == "=" else {
                result.failure = Failure(index: pairStart, problem: "'\(key)' is not followed by '='")
                break
            }
            i = s.index(after: i)
            skipSpaces()
            let valueStart = i
            if i < s.endIndex, s[i] == "'" {
                i = s.index(after: i)
                var closed = false
                while i < s.endIndex {
                    if s[i] == "\\" {
                        i = s.index(after: i)
                        if i < s.endIndex { i = s.index(after: i) }
                    } else if s[i] == "'" {
                        i = s.index(after: i)
                        closed = true
                        break
                    } else {
                        i = s.index(after: i)
                    }
                }
                guard closed else {
                    result.failure = Failure(index: pairStart, problem: "the quoted value of '\(key)' is not closed")
                    break
                }
            } else {
                while i < s.endIndex, !s[i].isWhitespace {
                    if s[i] == "\\" { i = s.index(after: i) }
                    if i < s.endIndex { i = s.index(after: i) }
                }
            }
            result.pairs.append(Pair(key: key, value: valueStart..<i))
        }
        return result
    }
}
