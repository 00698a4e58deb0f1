/// `QUERYABLE`, `SORTABLE`, `SEARCHABLE`: the indexes CloudKit keeps for a field.
public struct FieldOptions: OptionSet, Sendable, Hashable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let queryable = FieldOptions(rawValue: 1)
    public static let sortable = FieldOptions(rawValue: 2)
    public static let searchable = FieldOptions(rawValue: 4)

    /// The options' keywords, in the order the exports write them.
    public var keywords: [String] {
        [(FieldOptions.queryable, "QUERYABLE"), (.searchable, "SEARCHABLE"), (.sortable, "SORTABLE")].filter { contains($0.0) }.map(\.1)
    }
}
