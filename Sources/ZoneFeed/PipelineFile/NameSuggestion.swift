/// The "did you mean" of every diagnostic: which allowed name a misspelled one was meant to be.
public enum NameSuggestion {
    /// The allowed name closest to a misspelled one: at most two edits away, or the same but for
    /// case. Nil when nothing is that close, so that a wild guess is not offered.
    public static func closest(to name: String, among candidates: [String]) -> String? {
        // No allowed name is this long, so none is two edits away; and the edit distance of a
        // value of megabytes would take as many megabytes times the candidate's length.
        guard name.utf8.count <= 256 else { return nil }
        // By Unicode scalars, which compare as numbers, where Characters compare as strings.
        let target = name.lowercased().unicodeScalars.map { $0.value }
        var best: (candidate: String, distance: Int)?
        for candidate in candidates where candidate != name {
            // A length apart by more than two is more than two edits: the check that keeps a
            // file of a hundred thousand unknown keys from computing a million distances.
            guard abs(target.count - candidate.unicodeScalars.count) <= 2 else { continue }
            let other = candidate.lowercased().unicodeScalars.map { $0.value }
            guard let distance = editDistance(target, other, atMost: 2), distance < other.count else { continue }
            if best == nil || distance < best!.distance { best = (candidate, distance) }
        }
        return best?.candidate
    }

    /// "a, b or c".
    public static func alternatives(_ names: [String], conjunction: String) -> String {
        guard names.count > 1 else { return names.first ?? "" }
        return names.dropLast().joined(separator: ", ") + " \(conjunction) " + names.last!
    }

    /// Levenshtein distance, by Characters.
    public static func editDistance(_ a: String, _ b: String) -> Int {
        editDistance(Array(a), Array(b), atMost: Int.max)!
    }

    /// The distance when it is at most `limit`, nil otherwise: a row whose every entry is past
    /// the limit can only grow, so the rest is not computed.
    static func editDistance<Element: Equatable>(_ a: [Element], _ b: [Element], atMost limit: Int) -> Int? {
        if a.isEmpty { return b.count <= limit ? b.count : nil }
        if b.isEmpty { return a.count <= limit ? a.count : nil }
        var previous = [Int](repeating: 0, count: b.count + 1)
        for j in 0...b.count { previous[j] = j }
        var current = [Int](repeating: 0, count: b.count + 1)
        for i in 1...a.count {
            current[0] = i
            var rowMinimum = i
            for j in 1...b.count {
                let substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)
                current[j] = min(previous[j] + 1, current[j - 1] + 1, substitution)
                rowMinimum = min(rowMinimum, current[j])
            }
            if rowMinimum > limit { return nil }
            swap(&previous, &current)
        }
        return previous[b.count] <= limit ? previous[b.count] : nil
    }
}
