extension String {
    /// `wordCount` → `word_count`, `URLString` → `url_string`.
    public var snakeCased: String {
        var out = ""
        let chars = Array(self)
        for (i, c) in chars.enumerated() {
            if c.isUppercase {
                let prevLower = i > 0 && (chars[i - 1].isLowercase || chars[i - 1].isNumber)
                let nextLower = i + 1 < chars.count && chars[i + 1].isLowercase
                let prevUpper = i > 0 && chars[i - 1].isUppercase
                if i > 0 && (prevLower || (prevUpper && nextLower)) && out.last != "_" { out.append("_") }
                out.append(contentsOf: c.lowercased())
            } else if c == "-" || c == " " || c == "." {
                out.append("_")
            } else {
                out.append(c)
            }
        }
        return out
    }
}
