/// A destination's name that is not the plain form of its CloudKit name (too long, reserved, or
/// taken by another), and why.
public struct RenamedName: Sendable, Hashable, CustomStringConvertible {
    public var cloudKitName: String
    public var name: String
    public var reason: String
    public var description: String { "\(cloudKitName) → \(name) (\(reason))" }

    public init(cloudKitName: String, name: String, reason: String) {
        self.cloudKitName = cloudKitName
        self.name = name
        self.reason = reason
    }
}
