import ArgumentParser
import CloudKitWebServices
import Foundation
import ZoneFeed

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

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
                try Self.writeSecret(key.privateKeyPEM, to: file)
            } catch let error as KeyFileError {
                FileHandle.standardError.write(Data("zonefeed key create: \(error.message)\n".utf8))
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

        struct KeyFileError: Error {
            var message: String
            var exists = false
        }

        /// Creates `path` for its owner alone and writes `text`: never over an existing file, never
        /// through a symbolic link, and never readable by others, even for a moment.
        static func writeSecret(_ text: String, to path: String) throws {
            let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
            guard fd >= 0 else {
                let why = errno == EEXIST ? "it already exists, and a key is never overwritten: give another file" : String(cString: strerror(errno))
                throw KeyFileError(message: "cannot create \(InertText.escaped(path)): \(why)", exists: errno == EEXIST)
            }
            defer { close(fd) }
            // The umask may have taken bits away, never added any; this only makes sure.
            _ = fchmod(fd, 0o600)
            var bytes = Array(text.utf8)
            defer { for i in bytes.indices { bytes[i] = 0 } }
            var written = 0
            while written < bytes.count {
                let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + written, $0.count - written) }
                if n < 0, errno == EINTR { continue }
                guard n > 0 else {
                    let why = String(cString: strerror(errno))
                    unlink(path)
                    throw KeyFileError(message: "cannot write \(InertText.escaped(path)): \(why)")
                }
                written += n
            }
            guard fsync(fd) == 0 else {
                unlink(path)
                throw KeyFileError(message: "cannot write \(InertText.escaped(path)) to disk: \(String(cString: strerror(errno)))")
            }
        }
    }
}
