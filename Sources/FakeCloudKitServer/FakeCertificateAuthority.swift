import Crypto
import Foundation
import SwiftASN1
import X509

/// What the fake server presents over TLS: its certificate chain and private key (PEM), and the
/// CA certificate a client must trust to verify them.
public struct TLSIdentity: Sendable {
    public var certificateChainPEM: String
    public var privateKeyPEM: String
    /// The certificate to hand a client (`tls.caFile`); nil when the caller brought its own
    /// certificate and knows what signed it.
    public var caCertificatePEM: String?

    public init(certificateChainPEM: String, privateKeyPEM: String, caCertificatePEM: String? = nil) {
        self.certificateChainPEM = certificateChainPEM
        self.privateKeyPEM = privateKeyPEM
        self.caCertificatePEM = caCertificatePEM
    }
}

/// A certificate authority made at start and thrown away at exit, as a private CA behind a
/// TLS-inspecting proxy is: nothing on the machine trusts it until told to.
public enum FakeCertificateAuthority {
    /// A new CA and a server certificate it signed, valid for a day, for `hosts` (names and IP
    /// addresses) plus, with `loopback`, `localhost`, 127.0.0.1 and ::1.
    public static func makeIdentity(hosts: [String] = [], loopback: Bool = true) throws -> TLSIdentity {
        let now = Date()
        let (notBefore, notAfter) = (now - 3600, now + 86_400)
        let caKey = Certificate.PrivateKey(P256.Signing.PrivateKey())
        let caName = try DistinguishedName {
            OrganizationName("zonefeed fake-server")
            CommonName("zonefeed fake CloudKit CA")
        }
        let ca = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: caKey.publicKey, notValidBefore: notBefore, notValidAfter: notAfter,
            issuer: caName, subject: caName,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true))
            },
            issuerPrivateKey: caKey)

        let serverKey = Certificate.PrivateKey(P256.Signing.PrivateKey())
        let serverName = try DistinguishedName { CommonName("zonefeed fake CloudKit server") }
        let server = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: serverKey.publicKey, notValidBefore: notBefore, notValidAfter: notAfter,
            issuer: caName, subject: serverName,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.serverAuth])
                SubjectAlternativeNames(subjectAlternativeNames(for: hosts + (loopback ? ["localhost", "127.0.0.1", "::1"] : [])))
            },
            issuerPrivateKey: caKey)

        return TLSIdentity(
            certificateChainPEM: try server.serializeAsPEM().pemString, privateKeyPEM: try serverKey.serializeAsPEM().pemString,
            caCertificatePEM: try ca.serializeAsPEM().pemString)
    }

    /// Host names as DNS names and addresses as IP addresses, each once.
    static func subjectAlternativeNames(for hosts: [String]) -> [GeneralName] {
        var names: [GeneralName] = []
        var seen = Set<String>()
        for host in hosts where seen.insert(host).inserted {
            if let bytes = ipAddressBytes(host) {
                names.append(.ipAddress(ASN1OctetString(contentBytes: bytes[...])))
            } else if !host.isEmpty {
                names.append(.dnsName(host))
            }
        }
        return names
    }

    /// The 4 or 16 bytes of an IPv4 or IPv6 address written as text; nil for a name.
    static func ipAddressBytes(_ text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 { return withUnsafeBytes(of: &v4) { Array($0) } }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 { return withUnsafeBytes(of: &v6) { Array($0) } }
        return nil
    }
}
