/// The web auth token file could not be read or written; the sentence never holds the token.
struct WebAuthTokenFileError: Error, CustomStringConvertible {
    var path: String
    var problem: String
    /// Whether reading failed (else writing).
    var reading = false

    var description: String {
        reading
            ? "cannot read the web auth token file \(path): \(problem)"
            : "cannot write the web auth token file \(path) (\(problem)): check that its folder exists and is writable"
    }
}
