import ArgumentParser
import CloudKitWebServices
import Foundation
import ZoneFeed

/// `zonefeed key …`: server-to-server keys, for the public database.
struct KeyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "key",
        abstract: "Make server-to-server keys for the public database.",
        subcommands: [CreateCommand.self])

    struct CreateCommand: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "create",
            abstract: "Write a new P-256 private key (mode 0600) and print its public key as CloudKit Dashboard takes it.",
            discussion: """
                The public key goes to standard output, as `openssl ec -in KEY -pubout` prints it: paste it into \
                CloudKit Dashboard (API Access, Server-to-Server Keys, Public Key), then put the key ID Dashboard \
                shows in auth.serverKey.keyID and the file in auth.serverKey.privateKeyFile. An existing file is \
                never overwritten.
                """)

        @Argument(help: "Where to write the private key.")
        var file = "server-key.pem"

        func run() throws {
            let key = ServerKey.generate()
            do {
                try SecretFile.create(file, holding: key.privateKeyPEM, what: "server-to-server private key file", syncing: true)
            } catch {
                let why = error.exists ? "it already exists, and a key is never overwritten: give another file" : error.problem
                FileHandle.standardError.write(Data("zonefeed key create: cannot create \(InertText.escaped(file)): \(why)\n".utf8))
                // A file that is there already is the command's to fix; a disk that fails is not.
                throw error.exists ? Exit.usage : Exit.failed
            }
            FileHandle.standardError.write(
                Data(
                    """
                    zonefeed key create: wrote a new private key to \(InertText.escaped(file)) (mode 0600; fingerprint \(key.fingerprint)).
                    Paste the public key below into CloudKit Dashboard (API Access, Server-to-Server Keys, Public Key), then put \
                    the key ID it shows in auth.serverKey.keyID and \(InertText.escaped(file)) in auth.serverKey.privateKeyFile.

                    """.utf8))
            printLine(key.publicKeyPEM)
        }
    }
}
