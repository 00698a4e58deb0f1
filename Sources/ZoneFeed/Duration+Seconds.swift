extension Duration {
    /// A number of seconds from a setting as a `Duration`, to the millisecond, without a trap
    /// whatever the number: NaN is zero, and anything past ±10^15 s (thirty million years) is
    /// that. Settings are checked against their ranges where they are read; this is what keeps
    /// a value that slipped past a check (a new flag, a test) from stopping the process.
    public init(clampingSeconds seconds: Double) {
        guard !seconds.isNaN else {
            self = .zero
            return
        }
        let milliseconds = (min(max(seconds, -1e15), 1e15) * 1000).rounded()
        // Within ±10^18, so `exactly` always succeeds; written so that it could not trap if not.
        self = .milliseconds(Int64(exactly: milliseconds) ?? (milliseconds < 0 ? Int64.min : Int64.max))
    }

    /// `2 s`, `2.5 s`: a number of seconds as a setting gives it.
    public var secondsText: String { Self.secondsText(seconds) }

    public static func secondsText(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? "\(Int(value)) s" : "\(value) s"
    }
}
