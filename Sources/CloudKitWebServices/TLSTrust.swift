import Foundation
import NIOSSL

/// The certificate authorities a TLS connection to CloudKit (and to its web courier) trusts: the
/// system's store, plus the CA certificates of `caFile` when one is given (a TLS-inspecting proxy's
/// CA, or a test server's). Verification cannot be turned off: there is no setting for it.
///
/// swift-nio-ssl reads the system store but not `SSL_CERT_FILE` (field-notes §7), so a private CA
/// reaches the client only through here.
public struct TLSTrust: Sendable, CustomStringConvertible {
    /// The file the extra certificates came from, for messages; nil for the system store alone.
    public let caFile: String?
    let certificates: [NIOSSLCertificate]

    /// The system's store alone.
    public static let system = TLSTrust(caFile: nil, certificates: [])

    /// The largest CA file read: a bundle of every public CA is about 200 KiB.
    public static let maxFileBytes = 4 << 20

    public struct Refusal: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    /// The system's store plus every certificate of the PEM file at `caFile`. Refuses a file that
    /// cannot be read, is larger than `maxFileBytes`, or holds no PEM certificate, with a
    /// sentence that names the file and never quotes it.
    public init(caFile: String) throws(Refusal) {
        // Opened without waiting, then looked at: a FIFO opened for reading waits in `open` for
        // a writer, and held `validate` and every run there for ever.
        let fd = open(caFile, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else {
            let reason = FileManager.default.fileExists(atPath: caFile) ? "it cannot be read by the user running zonefeed" : "there is no such file"
            throw Refusal(description: "the CA certificate file \(caFile) was not read: \(reason)")
        }
        let handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        defer { try? handle.close() }
        var status = stat()
        guard fstat(fd, &status) == 0, status.st_mode & S_IFMT == S_IFREG else {
            let what = status.st_mode & S_IFMT == S_IFDIR ? "a folder" : "not a regular file (a FIFO, a device or a socket)"
            throw Refusal(description: "the CA certificate file \(caFile) was not read: it is \(what); name the PEM file itself")
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        let data: Data
        do {
            data = try handle.read(upToCount: Self.maxFileBytes + 1) ?? Data()
        } catch {
            throw Refusal(description: "the CA certificate file \(caFile) was not read: \(error.localizedDescription)")
        }
        guard data.count <= Self.maxFileBytes else {
            throw Refusal(
                description: "the CA certificate file \(caFile) was not read: it is larger than \(Self.maxFileBytes >> 20) MiB, "
                    + "and a bundle of every public CA is a few hundred kilobytes; check that this is the CA certificate")
        }
        let certificates = try? NIOSSLCertificate.fromPEMBytes(Array(data))
        guard let certificates, !certificates.isEmpty else {
            throw Refusal(
                description: "the CA certificate file \(caFile) holds no PEM certificate (-----BEGIN CERTIFICATE-----): "
                    + "give the CA's certificate in PEM form (openssl x509 -inform der -in ca.cer -out ca.pem converts a DER one)")
        }
        self.caFile = caFile
        self.certificates = certificates
    }

    init(caFile: String?, certificates: [NIOSSLCertificate]) {
        self.caFile = caFile
        self.certificates = certificates
    }

    /// A client configuration that verifies the server's certificate and host name against these
    /// CAs, offering HTTP/2 and HTTP/1.1 by ALPN (AsyncHTTPClient sets the protocols it speaks).
    public var clientConfiguration: TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.certificateVerification = .fullVerification
        if !certificates.isEmpty { configuration.additionalTrustRoots = [.certificates(certificates)] }
        return configuration
    }

    public var description: String {
        caFile.map { "the system's certificate authorities and those of \($0)" } ?? "the system's certificate authorities"
    }
}
