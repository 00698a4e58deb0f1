extension Int {
    /// 12345 → "12,345".
    public var grouped: String {
        let digits = String(self.magnitude)
        var out = ""
        for (i, c) in digits.enumerated() {
            if i > 0 && (digits.count - i) % 3 == 0 { out.append(",") }
            out.append(c)
        }
        return self < 0 ? "-" + out : out
    }
}
