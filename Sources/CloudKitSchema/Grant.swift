/// `GRANT READ, WRITE TO role`.
public struct Grant: Sendable, Hashable {
    public enum Privilege: String, Sendable, Hashable, CaseIterable {
        case read = "READ"
        case create = "CREATE"
        case write = "WRITE"
    }

    public var privileges: [Privilege]
    public var role: String

    public init(privileges: [Privilege], role: String) {
        self.privileges = privileges
        self.role = role
    }
}
