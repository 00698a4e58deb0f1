extension Duration {
    public var seconds: Double {
        let (s, attoseconds) = components
        return Double(s) + Double(attoseconds) / 1e18
    }

    /// `2 s`, `2.5 s`: a number of seconds as a setting gives it.
    public var secondsText: String { Self.secondsText(seconds) }

    public static func secondsText(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? "\(Int(value)) s" : "\(value) s"
    }
}
