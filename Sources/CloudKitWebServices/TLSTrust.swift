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

        public init(description: String) { self.description = description }
    }

    /// The system's store plus every certificate of `pem`, the text of the file at `caFile`
    /// (read by the caller, as every file of the pipeline is read: bounded in size and, for a
    /// FIFO, in time). Refuses text that holds no PEM certificate, with a sentence that names the
    /// file and never quotes it.
    public init(caFile: String, pem: String) throws(Refusal) {
        let certificates = try? NIOSSLCertificate.fromPEMBytes(Array(pem.utf8))
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
