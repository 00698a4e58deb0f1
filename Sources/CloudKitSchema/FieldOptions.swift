/// `QUERYABLE`, `SORTABLE`, `SEARCHABLE`: the indexes CloudKit keeps for a field.
public struct FieldOptions: OptionSet, Sendable, Hashable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let queryable = FieldOptions(rawValue: 1)
    public static let sortable = FieldOptions(rawValue: 2)
    public static let searchable = FieldOptions(rawValue: 4)
}
