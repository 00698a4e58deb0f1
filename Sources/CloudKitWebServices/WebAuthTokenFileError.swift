/// The web auth token file could not be written; the sentence never holds the token.
struct WebAuthTokenFileError: Error, CustomStringConvertible {
    var path: String
    var problem: String
    var description: String {
        "cannot write the web auth token file \(path) (\(problem)): check that its folder exists and is writable"
    }
}
