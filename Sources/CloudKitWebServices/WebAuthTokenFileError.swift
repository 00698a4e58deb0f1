/// The web auth token file could not be read or written; the sentence never holds the token.
struct WebAuthTokenFileError: Error, CustomStringConvertible {
    /// What failed. Every throw names it, so that a failed read is never told as a write, whose
    /// advice (the folder) would send a person to the wrong place.
    enum Operation {
        case read
        case write
    }

    var path: String
    var problem: String
    var operation: Operation

    init(_ operation: Operation, path: String, problem: String) {
        self.operation = operation
        self.path = path
        self.problem = problem
    }

    var description: String {
        switch operation {
        case .read: "cannot read the web auth token file \(path): \(problem)"
        case .write: "cannot write the web auth token file \(path) (\(problem)): check that its folder exists and is writable"
        }
    }
}
