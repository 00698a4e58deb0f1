/// The destination database is not encoded in UTF-8. CloudKit's text is Unicode, and a character
/// the database's encoding cannot hold (an emoji in LATIN1) failed its batch at every run, for
/// every zone, with nothing a reject could keep: refused before anything is written.
public struct DestinationEncodingError: Error, Sendable, CustomStringConvertible {
    public var database: String
    public var encoding: String

    /// The one encoding that takes any text zonefeed writes. Not SQL_ASCII, which keeps text's
    /// bytes as they come but whose jsonb refuses an escaped character past ASCII (`"caf\u00e9"`,
    /// as a server may write one): the batch failed at every run (0A000), every part of a
    /// record's fields kept as JSON being copied as written.
    static let accepted: Set<String> = ["UTF8"]

    public var description: String {
        let why =
            encoding == "SQL_ASCII"
            ? "its jsonb refuses CloudKit's text when an escape in the JSON spells a character past ASCII (\\u00e9)"
            : "a record holding a character \(encoding) cannot hold"
        return "database \(database) is encoded in \(encoding), and CloudKit's text is Unicode: \(why) would stop every run. "
            + "zonefeed writes to a UTF8 database: create one with CREATE DATABASE … ENCODING 'UTF8' TEMPLATE template0, "
            + "and point the pipeline's url at it"
    }
}
