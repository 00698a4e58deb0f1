/// An index a query needs, as CloudKit names it in a refusal (`Field '___modTime' is not marked
/// sortable`).
struct QueryIndex: Sendable, Hashable, CustomStringConvertible {
    var field: String
    var kind: String

    var description: String { "\(field) \(kind.uppercased())" }

    static func named(in reason: String) -> QueryIndex? {
        for field in ["___modTime", "___recordID"] where reason.contains(field) {
            for kind in ["queryable", "sortable", "searchable"] where reason.lowercased().contains("not marked \(kind)") {
                return QueryIndex(field: field, kind: kind)
            }
        }
        return nil
    }
}
