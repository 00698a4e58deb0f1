extension Duration {
    /// The duration as a number of seconds: what settings, metrics and CloudKit's `retryAfter`
    /// speak. Here once, for the client and the engine alike.
    public var seconds: Double {
        let (s, attoseconds) = components
        return Double(s) + Double(attoseconds) / 1e18
    }
}
