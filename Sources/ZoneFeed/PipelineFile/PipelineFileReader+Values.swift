import Yams

extension PipelineFileReader {
    // MARK: Scalars

    public func isNull(_ node: Node) -> Bool {
        guard case .scalar(let scalar) = node, scalar.style == .plain || scalar.style == .any else { return false }
        return ["", "~", "null", "Null", "NULL"].contains(scalar.string)
    }

    /// Whether `node` is a mapping with `key` among its keys.
    public func isMapping(_ node: Node, withKey key: String) -> Bool {
        guard case .mapping(let mapping) = node else { return false }
        return mapping.keys.contains { $0.string == key }
    }

    public func kindName(_ node: Node) -> String {
        switch node {
        case .scalar: return "a single value"
        case .mapping: return "a mapping"
        case .sequence: return "a list"
        case .alias: return "an alias"
        }
    }

    /// A scalar's value after `${VAR}` substitution; nil (reported) when it is not a scalar or a
    /// variable is missing.
    public func scalarValue(_ node: Node, path: String, expected: String) -> PipelineValue? {
        guard case .scalar(let scalar) = node else {
            report("\(path) must be \(expected), not \(kindName(node))", at: PipelinePosition(node.mark))
            return nil
        }
        guard let text = substitute(scalar, path: path) else { return nil }
        return PipelineValue(text: text, position: PipelinePosition(scalar.mark))
    }

    /// A scalar value by key. Absent or null: nil, and "missing" when required.
    public func text(_ key: String, in section: PipelineSection, expected: String, required: Bool = false) -> PipelineValue? {
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
    public func secret(_ key: String, in section: PipelineSection, emptyMeansAbsent: Bool, required: Bool = false) -> Secret? {
        guard let value = text(key, in: section, expected: "a string", required: required) else { return nil }
        if value.text.isEmpty {
            if emptyMeansAbsent { return nil }
            report("\(section.path(of: key)) is empty", at: value.position)
            return nil
        }
        return Secret(value.text)
    }

    /// A string that, when given, may not be empty.
    public func nonEmptyText(_ key: String, in section: PipelineSection, expected: String) -> String? {
        guard let value = text(key, in: section, expected: expected) else { return nil }
        guard !value.text.isEmpty else {
            report("\(section.path(of: key)) is empty: it must be \(expected)", at: value.position)
            return nil
        }
        return value.text
    }

    /// A whole number within `range`; anything else (a fraction, `1e300`, a number past the
    /// range) is refused at its line and column, so that no setting behind it can overflow.
    public func integer(_ key: String, in section: PipelineSection, range: ClosedRange<Int>) -> Int? {
        let expected = Self.expected(range)
        guard let value = text(key, in: section, expected: expected) else { return nil }
        guard let n = parseInteger(value.text), range.contains(n) else {
            report("\(section.path(of: key)) must be \(expected), not \(InertText.quoted(value.text))", at: value.position)
            return nil
        }
        return n
    }

    /// YAML 1.2's core booleans only: `yes` and `on` are strings there, and a typo must not
    /// silently mean false.
    public func boolean(_ key: String, in section: PipelineSection) -> Bool? {
        guard let value = text(key, in: section, expected: "true or false") else { return nil }
        switch value.text {
        case "true", "True", "TRUE": return true
        case "false", "False", "FALSE": return false
        default:
            report("\(section.path(of: key)) must be true or false, not \(InertText.quoted(value.text))", at: value.position)
            return nil
        }
    }

    /// A number within `range` (`unit`, such as "seconds", says what it counts): NaN, infinity
    /// and anything past the range are refused at its line and column, so that converting it
    /// later (to milliseconds, to a `Duration`) cannot overflow. Every number a pipeline file
    /// holds has a range, with a maximum as well as a minimum.
    public func number(_ key: String, in section: PipelineSection, range: ClosedRange<Double>, unit: String? = nil) -> Double? {
        let expected = Self.expected(range, unit: unit)
        guard let value = text(key, in: section, expected: expected) else { return nil }
        guard let n = parseNumber(value.text), range.contains(n) else {
            report("\(section.path(of: key)) must be \(expected), not \(InertText.quoted(value.text))", at: value.position)
            return nil
        }
        return n
    }

    /// `86,400`, `0.5`: a range's bound as a sentence says it.
    /// What a key of each kind takes, in the words of the diagnostics (and of the reference).
    static func expected(_ range: ClosedRange<Int>) -> String {
        "a whole number from \(range.lowerBound.grouped) to \(range.upperBound.grouped)"
    }

    static func expected(_ range: ClosedRange<Double>, unit: String? = nil) -> String {
        "a number\(unit.map { " of \($0)" } ?? "") from \(bound(range.lowerBound)) to \(bound(range.upperBound))"
    }

    static func expected<E: CaseIterable & RawRepresentable>(_ type: E.Type) -> String where E.RawValue == String {
        NameSuggestion.alternatives(E.allCases.map(\.rawValue), conjunction: "or")
    }

    static func bound(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? Int(value).grouped : "\(value)"
    }

    /// One of an enum's raw values; `explanations` replaces the generic sentence for values
    /// that deserve a reason of their own.
    public func choice<E: CaseIterable & RawRepresentable>(
        _ type: E.Type, _ key: String, in section: PipelineSection, explanations: [String: String] = [:]
    ) -> E? where E.RawValue == String {
        let names = E.allCases.map(\.rawValue)
        let expected = Self.expected(type)
        guard let value = text(key, in: section, expected: expected) else { return nil }
        if let choice = E(rawValue: value.text) { return choice }
        if let explanation = explanations[value.text] {
            report(explanation, at: value.position)
            return nil
        }
        var message = "unknown value \(InertText.quoted(value.text)) for \(key) (expected \(expected)"
        if let suggestion = NameSuggestion.closest(to: value.text, among: names) { message += "; did you mean '\(suggestion)'?" }
        report(message + ")", at: value.position)
        return nil
    }

    /// A list of strings; nil (reported) when it is something else.
    public func stringList(_ key: String, in section: PipelineSection, expected: String) -> [String]? {
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
}

extension PipelineFileReader {
    /// A whole number from 0 to `UInt64.max` (a seed, say).
    public func unsignedInteger(_ key: String, in section: PipelineSection) -> UInt64? {
        guard let value = text(key, in: section, expected: "a whole number of 0 or more") else { return nil }
        guard let n = parseUInt64(value.text) else {
            report("\(section.path(of: key)) must be a whole number from 0 to \(UInt64.max), not \(InertText.quoted(value.text))", at: value.position)
            return nil
        }
        return n
    }
}

/// `5000`, `5_000` and `+5000`.
private func parseInteger(_ text: String) -> Int? {
    let digits = text.trimmingSpaces()
    guard !digits.hasPrefix("_"), !digits.hasSuffix("_"), !digits.contains("__") else { return nil }
    return Int(digits.replacingOccurrences(of: "_", with: "", options: .literal))
}

/// `2.5`, `300`, `1_000`; nil for what is not a finite number (Double reads `nan` and `inf`).
private func parseNumber(_ text: String) -> Double? {
    let digits = text.trimmingSpaces()
    guard !digits.hasPrefix("_"), !digits.hasSuffix("_"), !digits.contains("__"),
        let n = Double(digits.replacingOccurrences(of: "_", with: "", options: .literal)), n.isFinite
    else { return nil }
    return n
}

private func parseUInt64(_ text: String) -> UInt64? {
    let digits = text.trimmingSpaces()
    guard !digits.hasPrefix("_"), !digits.hasSuffix("_"), !digits.contains("__") else { return nil }
    return UInt64(digits.replacingOccurrences(of: "_", with: "", options: .literal))
}
