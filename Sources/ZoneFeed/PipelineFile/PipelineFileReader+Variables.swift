import Yams

extension PipelineFileReader {
    // MARK: ${VAR} substitution

    /// Replaces `${VAR}` and `${VAR:-default}` from the environment, and `$$` by `$`. A `$`
    /// followed by anything else stays as it is, so passwords with a `$` in them need no escaping.
    func substitute(_ scalar: Node.Scalar, path: String) -> String? {
        let chars = Array(scalar.string.unicodeScalars)
        // Where the value lies on its line is found once, at the first problem: a value may hold
        // thousands of `${`, and finding it again for each made such a value take minutes.
        var place: ((Int) -> PipelinePosition)?
        func position(ofOffset offset: Int) -> PipelinePosition {
            if place == nil { place = positions(in: scalar, value: chars) }
            return place!(offset)
        }
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
                    at: position(ofOffset: i)
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
            // What the braces hold is quoted only when it reads as a variable's name by custom
            // (upper case): a `${` may be part of a password or a token written in the file,
            // and the diagnostic must not print it.
            if !isVariableName(name) {
                report(
                    "the '${' in \(path) does not begin a variable reference: names are letters, digits and '_' "
                        + "(write '$$' for a literal '$'; what follows is not quoted, as it may be part of a secret)",
                    at: position(ofOffset: i)
                )
                failed = true
            } else if let value = environment[name], !(fallback != nil && value.isEmpty) {
                out.append(contentsOf: value.unicodeScalars)
            } else if let fallback {
                out.append(contentsOf: fallback.unicodeScalars)
            } else {
                let named =
                    isCustomaryVariableName(name)
                    ? "environment variable \(name) is not set"
                    : "the environment variable named here is not set (its name is not quoted: not in upper case, it may be part "
                        + "of a secret with a '$', which '$$' writes)"
                report("\(named) (needed by \(path))", at: position(ofOffset: i))
                failed = true
            }
            i = close + 1
        }
        return failed ? nil : String(out)
    }

    /// A name as environment variables are named by custom: upper-case letters, digits and '_'.
    func isCustomaryVariableName(_ name: String) -> Bool {
        name.unicodeScalars.allSatisfy { ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "_" }
    }

    func isVariableName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, !("0"..."9").contains(first) else { return false }
        return name.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "_"
        }
    }

    /// The position of each Unicode scalar of a scalar's value (`value`, by its offset), when the
    /// value is written on one line as it reads (plain, or quoted without escapes); else the
    /// scalar's own.
    func positions(in scalar: Node.Scalar, value: [Unicode.Scalar]) -> (_ offset: Int) -> PipelinePosition {
        let start = PipelinePosition(scalar.mark)
        let prefix: Int
        switch scalar.style {
        case .plain, .any: prefix = 0
        case .singleQuoted, .doubleQuoted: prefix = 1
        default: return { _ in start }
        }
        guard start.line >= 1, start.line <= lines.count, start.column >= 1 else { return { _ in start } }
        let line = lines[start.line - 1]
        let from = start.column - 1 + prefix
        guard from + value.count <= line.count, line[from..<(from + value.count)].elementsEqual(value) else { return { _ in start } }
        return { offset in PipelinePosition(line: start.line, column: start.column + prefix + offset) }
    }
}
