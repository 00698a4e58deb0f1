/// The "did you mean" of every diagnostic: which allowed name a misspelled one was meant to be.
public enum NameSuggestion {
    /// The allowed name closest to a misspelled one: at most two edits away, or the same but for
    /// case. Nil when nothing is that close, so that a wild guess is not offered.
    public static func closest(to name: String, among candidates: [String]) -> String? {
        var best: (candidate: String, distance: Int)?
        for candidate in candidates where candidate != name {
            let distance = editDistance(name.lowercased(), candidate.lowercased())
            guard distance <= 2, distance < candidate.count else { continue }
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
}
