import LibPQ
import Testing
import ZoneFeedPostgres

/// What `zonefeed psql` puts on psql's command line, which every local user can read, and what
/// it writes in psql's private password file instead.
@Suite struct PasswordlessConninfoTests {
    @Test(arguments: [
        "postgresql://app:p%40ss%3Aw%20rd%27%5C@db.example:5433/notes?sslmode=require",
        #"host=db.example port=5433 user=app password='p@ss:w rd\'\\' dbname=notes sslmode=require"#,
    ])
    func thePasswordLeavesTheConnectionStringAndTheRestMeansTheSame(conninfo: String) throws {
        let split = try #require(PasswordlessConninfo(conninfo))
        #expect(split.password == #"p@ss:w rd'\"#)
        #expect(split.conninfo == "user='app' dbname='notes' host='db.example' port='5433' sslmode='require'")
        #expect(split.passwordFileLine == #"*:*:*:*:p@ss\:w rd'\\"# + "\n", "':' and '\\' escaped as libpq's password file wants")
    }

    @Test func aConnectionStringWithoutAPasswordIsPassedAsGiven() throws {
        for conninfo in ["host=/tmp/zonefeed-pg port=5432 user=zonefeed dbname=zonefeed", "postgresql://app@db/notes", "host=db password=''"] {
            let split = try #require(PasswordlessConninfo(conninfo))
            #expect(split.conninfo == conninfo)
            #expect(split.password == nil)
            #expect(split.passwordFileLine == nil)
        }
    }

    @Test func valuesWithQuotesAndBackslashesAreQuotedForLibpq() throws {
        let split = try #require(PasswordlessConninfo(#"host=db dbname='it\'s \\ here' password=x"#))
        #expect(split.conninfo == #"dbname='it\'s \\ here' host='db'"#)
    }

    /// A quote that a combining mark follows is one Character with it, which an escaping by
    /// Characters passed by: the quote then ended the value for libpq, and the rest of the
    /// value was read as more parameters (here, another host).
    @Test func aQuoteBeforeACombiningMarkIsEscapedToo() throws {
        let split = try #require(PasswordlessConninfo("host=db dbname='x\\'\u{301} host=elsewhere' password=x"))
        let parameters = try #require(Connection.parameters(of: split.conninfo), "libpq reads it: \(split.conninfo.debugDescription)")
        let dbname = parameters.first { $0.keyword == "dbname" }?.value
        #expect(dbname.map { Array($0.utf8) } == Array("x'\u{301} host=elsewhere".utf8))
        #expect(parameters.filter { $0.keyword == "host" }.map(\.value) == ["db"])
    }

    @Test func aPasswordWithALineBreakHasNoPasswordFileLine() throws {
        let split = try #require(PasswordlessConninfo("host=db password='two\nlines'"))
        #expect(split.password == "two\nlines")
        #expect(split.passwordFileLine == nil, "a password file cannot hold it; psql gets PGPASSWORD instead")
    }

    /// A client key's passphrase goes into a service file, which the string then names; it
    /// stays where it was when a service is named already (by the string or PGSERVICE), or it
    /// cannot be one line of a service file.
    @Test func aKeyPassphraseGoesInAServiceFileWhereOneCanHoldIt() throws {
        let moved = try #require(PasswordlessConninfo("host=db sslpassword='s3cret' sslmode=require", environmentNamesAService: false))
        #expect(moved.conninfo == "host='db' sslmode='require' service='zonefeed'")
        #expect(moved.serviceFile == "[zonefeed]\nsslpassword=s3cret\n")
        #expect(moved.password == nil)
        for (conninfo, environment) in [
            ("host=db sslpassword=s3cret service=prod", false), ("host=db sslpassword=s3cret", true),
            ("host=db sslpassword='two\nlines'", false), ("host=db sslpassword=' padded'", false),
            ("host=db sslpassword='tab\t'", false), ("host=db sslpassword='\u{0B}vertical'", false),
        ] {
            let kept = try #require(PasswordlessConninfo(conninfo, environmentNamesAService: environment))
            #expect(kept.serviceFile == nil && kept.conninfo == conninfo, "\(conninfo.debugDescription): \(kept.conninfo)")
        }
    }

    @Test func aStringLibpqCannotParseIsNotSplit() {
        #expect(PasswordlessConninfo("host=db password='unclosed") == nil)
    }
}
