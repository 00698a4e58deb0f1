/// Where a client keeps its web auth tokens between runs: a file (`WebAuthTokenFile`, the
/// default) or anything else that outlives the process, such as a table in the destination
/// database for a pod whose disk does not outlive its run. What is kept is text in the token
/// file's format (`WebAuthTokenFile.text(of:)`): the tokens, newest first, and what was learned
/// of the server. A vault holds secrets; it never prints them.
public protocol WebAuthTokenVault: Sendable {
    /// Where the tokens are kept, for logs and messages: a path or a table, never a token.
    var location: String { get }

    /// What was saved last; nil when nothing was.
    func load() throws -> String?

    /// Replaces what is saved. Once this returns, a process killed at any moment leaves `text`,
    /// or what a later `save` replaced it with.
    func save(_ text: String) throws

    /// Replaces what is saved with what `change` makes of it, as `save` does. Processes that
    /// share the vault must not interleave here, or one's save drops what the other saved in
    /// between: a vault they share implements it atomically (a transaction); the default, a
    /// `load` then a `save`, suits a vault one process uses.
    func update(_ change: (String?) throws -> String) throws

    /// Makes what was saved survive a power loss too: nothing to do when `save` already does.
    func sync()
}

extension WebAuthTokenVault {
    public func update(_ change: (String?) throws -> String) throws {
        try save(change(load()))
    }
}
