import Foundation
import LibPQ

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
///
/// Read by Unicode scalars, as libpq reads the URI's bytes, never by `Character`s: a combining
/// mark after the `@` or the `:` (a password may begin with one) makes one Character of the two,
/// which a Character search passes by, and the password was then printed.
private func redactConnectionURI(_ s: String) -> String {
    let scalars = s.unicodeScalars
    guard let schemeEnd = s.range(of: "://", options: .literal)?.upperBound else { return s }
    let rest = scalars[schemeEnd...]

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

    var out = String(scalars[..<schemeEnd])
    var hostStart = rest.startIndex
    if let at {
        let userinfo = rest[..<at]
        if let colon = userinfo.firstIndex(of: ":") {
            out += String(userinfo[...colon]) + "<redacted>"
        } else {
            out += String(userinfo)
        }
        out += "@"
        hostStart = rest.index(after: at)
    }

    let tail = rest[hostStart...]
    guard let q = tail.firstIndex(of: "?") else { return out + String(tail) }
    out += String(tail[...q])
    let parameters = tail[tail.index(after: q)...]
        .split(separator: "&", omittingEmptySubsequences: false)
        .map { parameter -> String in
            guard let eq = parameter.firstIndex(of: "=") else { return String(parameter) }
            let key = String(parameter[..<eq])
            if isSecretParameter(key) { return key + "=<redacted>" }
            return String(parameter)
        }
    return out + parameters.joined(separator: "&")
}

/// `key=value key='quoted value'`, redacted value by value; a `dbname` may itself hold a whole
/// connection string, which libpq expands, so it is redacted in turn. A pair whose key is no
/// libpq parameter is hidden whole: it is most likely a password's second word, after a space
/// that should have been inside quotes.
private func redactConninfo(_ s: String) -> String {
    // No '=', no pair: `embedded`, or a database's plain name inside `dbname`.
    guard s.contains("=") else { return s }
    let parsed = ConninfoParser.parse(s)
    // Sliced by scalars: the parser's places need not fall between Characters.
    let scalars = s.unicodeScalars
    func text(_ range: Range<String.Index>) -> String { String(scalars[range]) }
    var out = ""
    var copied = s.startIndex
    for pair in parsed.pairs {
        if !ConninfoParser.isParameter(pair.key) {
            out += text(copied..<pair.start) + "<redacted>"
            copied = pair.value.upperBound
        } else if isSecretParameter(pair.key) {
            out += text(copied..<pair.value.lowerBound) + "<redacted>"
            copied = pair.value.upperBound
        } else if pair.key == "dbname" {
            let value = scalars[pair.value]
            let quoted = value.first == "'"
            let inner = String(quoted ? value.dropFirst().dropLast() : value)
            let redacted = redactConnectionString(inner)
            if redacted.utf8.elementsEqual(inner.utf8) == false {
                out += text(copied..<pair.value.lowerBound) + (quoted ? "'\(redacted)'" : redacted)
                copied = pair.value.upperBound
            }
        }
    }
    guard let failure = parsed.failure else { return out + text(copied..<s.endIndex) }
    // libpq would refuse the rest too, and a word that is not a pair is most likely part of a
    // password that needed quotes: none of it is printed.
    out += text(copied..<failure.index)
    return out + "<redacted>"
}

/// A scanner for libpq's `key = value` connection strings, following `conninfo_parse` in libpq's
/// fe-connect.c: spaces around `=` are allowed, a value is either a run of non-space characters
/// or single-quoted, and a backslash escapes the next character in both.
///
/// Kept beside libpq's own parser, which decides whether a string is valid
/// (`Connection.canParse`), because libpq gives values but not where they were written: hiding
/// a password in place, the rest of the string kept as the user wrote it, needs the positions.
/// It also says which pair is wrong without quoting it, where libpq's message may quote a password:
/// a sentence names a key only when it is one of libpq's parameter names (a name from libpq's
/// list, not a piece of the string), and otherwise the pair by its place. `password=correct
/// horse battery` makes `horse` look like a key: quoting it would print the password.
struct ConninfoParser {
    struct Pair {
        var key: Substring
        /// The value as written, quotes included.
        var value: Range<String.Index>
        /// Where the key starts.
        var start: String.Index
    }

    struct Failure {
        /// Where the pair that could not be parsed starts.
        var index: String.Index
        var problem: String
    }

    var pairs: [Pair] = []
    var failure: Failure?

    /// Whether `key` is one of libpq's parameter names, and so safe to quote.
    static func isParameter(_ key: some StringProtocol) -> Bool {
        Connection.parameterNames.contains(String(key))
    }

    /// `'password'`, or "its 3rd pair" when the key is not a name libpq knows.
    static func describe(key: some StringProtocol, place: Int) -> String {
        isParameter(key) ? "'\(key)'" : "its \(ordinal(place)) pair"
    }

    /// 1st, 2nd, 3rd, 4th, 11th, 21st.
    static func ordinal(_ n: Int) -> String {
        let suffix: String
        switch (n % 10, n % 100) {
        case (_, 11...13): suffix = "th"
        case (1, _): suffix = "st"
        case (2, _): suffix = "nd"
        case (3, _): suffix = "rd"
        default: suffix = "th"
        }
        return "\(n)\(suffix)"
    }

    /// Read by Unicode scalars, as libpq reads bytes, never by `Character`s: a backslash or a
    /// quote after a prepended mark (U+0600), or before a combining one, is part of a larger
    /// Character, which a Character scan passes by; the quoted password then ended early here,
    /// where libpq read on, and its rest was printed as the next pair. Whitespace is ASCII's, as
    /// libpq's `isspace`.
    static func parse(_ s: String) -> ConninfoParser {
        var result = ConninfoParser()
        let scalars = s.unicodeScalars
        var i = scalars.startIndex
        func isSpace(_ scalar: Unicode.Scalar) -> Bool { scalar == " " || ("\t"..."\r").contains(scalar) }
        func skipSpaces() {
            while i < scalars.endIndex, isSpace(scalars[i]) { i = scalars.index(after: i) }
        }
        while true {
            skipSpaces()
            guard i < scalars.endIndex else { break }
            let pairStart = i
            while i < scalars.endIndex, !isSpace(scalars[i]), scalars[i] != "=" { i = scalars.index(after: i) }
            let key = Substring(scalars[pairStart..<i])
            skipSpaces()
            guard i < scalars.endIndex, scalars[i] == "=" else {
                let place = ordinal(result.pairs.count + 1)
                result.failure = Failure(
                    index: pairStart,
                    problem: "its \(place) word is not followed by '=' (a value with a space must be single-quoted, as in password='two words')")
                break
            }
            i = scalars.index(after: i)
            skipSpaces()
            let valueStart = i
            if i < scalars.endIndex, scalars[i] == "'" {
                i = scalars.index(after: i)
                var closed = false
                while i < scalars.endIndex {
                    if scalars[i] == "\\" {
                        i = scalars.index(after: i)
                        if i < scalars.endIndex { i = scalars.index(after: i) }
                    } else if scalars[i] == "'" {
                        i = scalars.index(after: i)
                        closed = true
                        break
                    } else {
                        i = scalars.index(after: i)
                    }
                }
                guard closed else {
                    result.failure = Failure(
                        index: pairStart, problem: "the quoted value of \(describe(key: key, place: result.pairs.count + 1)) is not closed")
                    break
                }
            } else {
                while i < scalars.endIndex, !isSpace(scalars[i]) {
                    if scalars[i] == "\\" { i = scalars.index(after: i) }
                    if i < scalars.endIndex { i = scalars.index(after: i) }
                }
            }
            result.pairs.append(Pair(key: key, value: valueStart..<i, start: pairStart))
        }
        return result
    }
}
