/// The destination database is not encoded in UTF-8. CloudKit's text is Unicode, and a character
/// the database's encoding cannot hold (an emoji in LATIN1) failed its batch at every run, for
/// every zone, with nothing a reject could keep: refused before anything is written.
public struct DestinationEncodingError: Error, Sendable, CustomStringConvertible {
    public var database: String
    public var encoding: String

    /// The encodings that take any text zonefeed writes: UTF-8, and SQL_ASCII, which keeps bytes
    /// as they come.
    static let accepted: Set<String> = ["UTF8", "SQL_ASCII"]

    public var description: String {
        "database \(database) is encoded in \(encoding), and CloudKit's text is Unicode: a record holding a character \(encoding) "
            + "cannot hold would stop every run. zonefeed writes to a UTF8 database: create one with "
            + "CREATE DATABASE … ENCODING 'UTF8' TEMPLATE template0, and point the pipeline's url at it"
    }
}
