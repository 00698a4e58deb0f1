/// Where something is in a `.ckdb` file: 1-based line, and column in Unicode scalars.
public struct SchemaPosition: Sendable, Hashable {
    public var line: Int
    public var column: Int

    public init(line: Int, column: Int) {
        self.line = line
        self.column = column
    }
}
